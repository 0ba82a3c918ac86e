// EstimateJob against llmsim's vLLM and llama.cpp: the estimate's requests
// and prompt tokens are what the run then sends and reports, nothing is
// sent to a model and nothing is stored, and a request the run would
// refuse is refused the same way.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

using ::testing::HasSubstr;

// Questions of different lengths: "why" and then i words.
v1::GenerateJobRequest Questions(int rows) {
  v1::GenerateJobRequest request;
  request.mutable_block()->set_model("m");
  request.mutable_block()->set_prompt_template("Q{{id}}: {{question}}");
  for (int i = 0; i < rows; ++i) {
    google::protobuf::Struct* row = request.add_rows();
    (*row->mutable_fields())["id"].set_number_value(i);
    std::string question = "why";
    for (int w = 0; w < i; ++w) question += " word" + std::to_string(w);
    (*row->mutable_fields())["question"].set_string_value(question);
  }
  request.set_batch_size(3);
  request.set_num_workers(4);
  return request;
}

class EstimateTest : public ServiceFixture {
 protected:
  EstimateTest() {
    // sdgd's own defaults: what the server is, is asked of it.
    backend_defaults_.batching = BatchingMode::kAuto;
    backend_defaults_.in_flight_mode = InFlightMode::kAuto;
  }

  absl::StatusOr<v1::JobEstimate> Estimate(
      const v1::GenerateJobRequest& request) {
    grpc::ClientContext context;
    v1::JobEstimate estimate;
    grpc::Status status = stub_->EstimateJob(&context, request, &estimate);
    if (!status.ok()) return FromGrpc(status);
    return estimate;
  }

  absl::StatusOr<v1::Dataset> Upload(const std::string& data,
                                     const std::string& id) {
    grpc::ClientContext context;
    v1::Dataset dataset;
    auto writer = stub_->UploadDataset(&context, &dataset);
    v1::DatasetChunk chunk;
    chunk.set_data(data);
    chunk.set_dataset_id(id);
    writer->Write(chunk);
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (!status.ok()) return FromGrpc(status);
    return dataset;
  }
};

// vLLM takes a shard's completions prompts as one request: 10 rows in
// shards of 3 are 4 requests, each sample counted once by the reply.
TEST_F(EstimateTest, AnEstimateCountsThePromptsAsTheRunReportsThem) {
  SimThread sim;
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Questions(10);
  request.mutable_block()->set_n(2);
  request.mutable_block()->set_max_tokens(7);

  absl::StatusOr<v1::JobEstimate> estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_EQ(estimate->rows(), 10);
  ASSERT_EQ(estimate->steps_size(), 1);
  const v1::StepEstimate& step = estimate->steps(0);
  EXPECT_EQ(step.backend(), "sim");
  EXPECT_EQ(step.model(), "m");
  EXPECT_EQ(step.rows(), 10);
  EXPECT_TRUE(step.rows_exact());
  EXPECT_EQ(step.samples_per_row(), 2);
  EXPECT_EQ(step.requests(), 4);
  EXPECT_EQ(step.prompt_tokens_counting(), v1::TOKEN_COUNTING_TOKENIZER);
  EXPECT_EQ(step.tokenized_prompts(), 10);
  // "Q{id}: why" is 2 words, and row i adds i: 20 + 45.
  EXPECT_EQ(step.prompt_tokens(), 65);
  EXPECT_EQ(step.max_completion_tokens(), 7 * 2 * 10);
  EXPECT_TRUE(estimate->complete());
  EXPECT_TRUE(estimate->completion_tokens_bounded());
  EXPECT_EQ(estimate->requests(), 4);
  EXPECT_EQ(estimate->prompt_tokens(), 65);
  EXPECT_EQ(estimate->max_completion_tokens(), 140);

  // Nothing went to the model; the tokenizer was asked once per prompt.
  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["requests"], 0);
  EXPECT_EQ(stats["tokenize_requests"], 10);
  // And nothing was stored.
  grpc::ClientContext context;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(&context, {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);

  Events events = Run(request);
  const v1::JobFinished finished = events.Finished();
  ASSERT_EQ(finished.state(), v1::JOB_STATE_SUCCEEDED) << finished.reason();
  EXPECT_EQ(finished.usage().prompt_tokens(), estimate->prompt_tokens());
  EXPECT_LE(finished.usage().completion_tokens(),
            estimate->max_completion_tokens());
  EXPECT_EQ(sim.Stats()["requests"], estimate->requests());
}

// Chat: a request per row, and the system prompt counts in each.
TEST_F(EstimateTest, AChatEstimateCountsTheSystemPromptAsTheRunDoes) {
  SimThread sim;
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Questions(7);
  request.mutable_block()->set_api(v1::API_CHAT);
  request.mutable_block()->set_system_prompt("You answer in one short line.");

  absl::StatusOr<v1::JobEstimate> estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  const v1::StepEstimate& step = estimate->steps(0);
  EXPECT_EQ(step.requests(), 7);
  EXPECT_EQ(step.prompt_tokens_counting(), v1::TOKEN_COUNTING_TOKENIZER);
  // 6 words of system prompt in each of 7 requests, 14 + 21 of prompts.
  EXPECT_EQ(step.prompt_tokens(), 6 * 7 + 14 + 21);
  // No max_tokens: the completions have no bound but the model's.
  EXPECT_FALSE(step.completion_tokens_bounded());
  EXPECT_FALSE(estimate->completion_tokens_bounded());
  EXPECT_EQ(estimate->max_completion_tokens(), 0);

  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(events.Finished().usage().prompt_tokens(), step.prompt_tokens());
  EXPECT_EQ(sim.Stats()["requests"], 7);
}

// llama.cpp takes one choice per request, so each of a row's samples is a
// request carrying its prompt; its chat prompt is counted as the template
// renders it (/apply-template, then /tokenize).
TEST_F(EstimateTest, LlamaCppCountsEachSamplesRequestAndTheTemplatedChat) {
  llmsim::SimServer::Options llama;
  llama.mode = llmsim::Mode::kLlamaCpp;
  llama.slots = 2;
  SimThread sim(llama);
  StartServer({{"laptop", sim.url()}});
  v1::GenerateJobRequest request = Questions(5);
  request.mutable_block()->set_api(v1::API_CHAT);
  request.mutable_block()->set_n(3);
  request.mutable_block()->set_max_tokens(4);

  absl::StatusOr<v1::JobEstimate> estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  const v1::StepEstimate& step = estimate->steps(0);
  EXPECT_EQ(step.requests(), 5 * 3);
  EXPECT_EQ(step.prompt_tokens(), (10 + 10) * 3);
  EXPECT_EQ(step.max_completion_tokens(), 4 * 3 * 5);
  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["requests"], 0);
  EXPECT_EQ(stats["tokenize_requests"], 2 * 5);

  // Before any reply, there is no pace to give a time range by.
  EXPECT_EQ(estimate->measured_requests(), 0);
  EXPECT_FALSE(estimate->has_min_duration());

  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED)
      << events.Finished().reason();
  EXPECT_EQ(events.Finished().usage().prompt_tokens(), step.prompt_tokens());
  EXPECT_EQ(sim.Stats()["requests"], step.requests());

  // The run's 15 replies measured the backend (not the estimate's
  // tokenizer requests): now there is a range.
  estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_EQ(estimate->measured_requests(), 15);
  ASSERT_TRUE(estimate->has_min_duration());
  ASSERT_TRUE(estimate->has_max_duration());
  auto nanos = [](const google::protobuf::Duration& d) {
    return d.seconds() * 1000000000 + d.nanos();
  };
  EXPECT_GT(nanos(estimate->min_duration()), 0);
  EXPECT_LE(nanos(estimate->min_duration()), nanos(estimate->max_duration()));
}

// A hosted API serves no tokenizer: the estimate is a token per 4 bytes,
// and says so.
TEST_F(EstimateTest, WithoutATokenizerTheEstimateSaysItCountedBytes) {
  llmsim::SimServer::Options hosted;
  hosted.mode = llmsim::Mode::kOpenAi;
  SimThread sim(hosted);
  StartServer({{"hosted", sim.url()}});
  v1::GenerateJobRequest request = Questions(4);

  absl::StatusOr<v1::JobEstimate> estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  const v1::StepEstimate& step = estimate->steps(0);
  EXPECT_EQ(step.prompt_tokens_counting(), v1::TOKEN_COUNTING_BYTES);
  EXPECT_EQ(step.tokenized_prompts(), 0);
  // "Q0: why", "Q1: why word0", ...: 7 + 13 + 19 + 25 bytes.
  EXPECT_EQ(step.prompt_tokens(), (64 + 3) / 4);
  EXPECT_EQ(step.requests(), 4);
  EXPECT_EQ(sim.Stats()["tokenize_requests"], 0);
}

TEST_F(EstimateTest, AnUploadIsEstimatedAndStaysForTheJob) {
  SimThread sim;
  StartServer({{"sim", sim.url()}});
  ASSERT_TRUE(Upload("{\"id\": 0, \"question\": \"a b c\"}\n"
                     "{\"id\": 1, \"question\": \"d\"}\n"
                     "{\"id\": 2, \"question\": \"e f\"}\n"
                     "{\"id\": 3, \"question\": \"g\"}\n",
                     "four")
                  .ok());
  v1::GenerateJobRequest request = Questions(0);
  request.set_dataset_id("four");

  absl::StatusOr<v1::JobEstimate> estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_EQ(estimate->rows(), 4);
  EXPECT_EQ(estimate->prompt_tokens(), 4 + 7);

  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(events.Finished().usage().prompt_tokens(), 11);
}

// A file under --data_root streams through the estimate; a bad line is
// named as the run would name it, and a path out of the root is refused.
TEST_F(EstimateTest, ADatasetPathIsReadAsTheRunReadsIt) {
  SimThread sim;
  const std::string root = MakeTempDir();
  WriteFile(root + "/in.jsonl",
            "{\"id\": 0, \"question\": \"a b\"}\n"
            "{\"id\": 1, \"question\": \"c\"}\n"
            "{\"id\": 2, \"question\": \"d e f\"}\n");
  WriteFile(root + "/bad.jsonl",
            "{\"id\": 0, \"question\": \"a\"}\nnot json\n");
  ServerOptions options;
  options.service.data_root = root;
  StartServer({{"sim", sim.url()}}, options);
  v1::GenerateJobRequest request = Questions(0);
  request.set_dataset_path("in.jsonl");

  absl::StatusOr<v1::JobEstimate> estimate = Estimate(request);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_EQ(estimate->rows(), 3);
  EXPECT_EQ(estimate->prompt_tokens(), 3 + 2 + 4);
  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(events.Finished().usage().prompt_tokens(),
            estimate->prompt_tokens());

  request.set_dataset_path("bad.jsonl");
  absl::Status bad = Estimate(request).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("bad.jsonl: line 2: "));
  request.set_dataset_path("../elsewhere.jsonl");
  EXPECT_THAT(Estimate(request).status().message(),
              HasSubstr("contains \"..\"; give a path under --data_root"));
}

// What GenerateJob refuses, EstimateJob refuses with the same words; and
// an upload that is not there is NOT_FOUND.
TEST_F(EstimateTest, ARequestTheRunWouldRefuseIsRefusedTheSameWay) {
  SimThread sim;
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Questions(3);
  request.mutable_block()->set_prompt_template("{{answer}}");
  absl::Status refused = Estimate(request).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              HasSubstr("block.prompt_template: column \"answer\" is missing "
                        "from row 0"));
  Events run = Run(request);
  EXPECT_EQ(run.status.error_message(), std::string(refused.message()));

  request = Questions(3);
  request.mutable_block()->set_backend("nowhere");
  refused = Estimate(request).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("block.backend"));

  request = Questions(0);
  request.set_dataset_id("never-uploaded");
  refused = Estimate(request).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(refused.message(), HasSubstr("upload it first"));
  EXPECT_EQ(sim.Stats()["requests"], 0);
}

// --tenant_max_enqueued_tokens: the prompt tokens (at 4 bytes a token) of a
// tenant's queued and running jobs together, as Azure's and LiteLLM's
// enqueued-token limits. Its jobs here hang on a backend that never answers
// until they are cancelled, so they hold their share for as long as the
// test needs.
class EnqueuedTokensTest : public ServiceFixture {
 protected:
  static ServerOptions Limit(int64_t tokens) {
    ServerOptions options;
    options.scheduler.tenant_max_enqueued_tokens = tokens;
    return options;
  }

  absl::Status Create(v1::GenerateJobRequest request, const std::string& id) {
    request.set_job_id(id);
    grpc::ClientContext context;
    v1::Job job;
    return FromGrpc(stub_->CreateJob(&context, request, &job));
  }

  // Cancels the job and reads its events to `finished`.
  void CancelAndAwaitEnd(const std::string& id) {
    ASSERT_TRUE(CancelJob(id).ok());
    grpc::ClientContext context;
    v1::WatchJobRequest request;
    request.set_job_id(id);
    auto reader = stub_->WatchJob(&context, request);
    v1::JobEvent event;
    bool finished = false;
    while (reader->Read(&event)) finished = finished || event.has_finished();
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(finished);
  }

  SimThread hanging_{WithLatency(absl::Minutes(10))};
};

TEST_F(EnqueuedTokensTest, AJobThatWouldPassTheLimitWaitsForOneToEnd) {
  StartServer({{"sim", hanging_.url()}}, Limit(30));
  // "Q0: why", "Q1: why word0", ...: 7 + 13 + 19 + 25 bytes, 16 tokens.
  ASSERT_TRUE(Create(Questions(4), "first").ok());
  absl::Status refused = Create(Questions(4), "second");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "tenant \"\"'s queued and running jobs hold 16 of its limit of 30 "
            "enqueued prompt tokens (--tenant_max_enqueued_tokens), 14 left, "
            "and the job's prompts are about 16; wait for a job to finish, or "
            "cancel one");
  // What fits in what is left is taken: 7 + 13 bytes, 5 tokens.
  ASSERT_TRUE(Create(Questions(2), "small").ok());
  // A job over the limit on its own says so (1,335 bytes).
  refused = Create(Questions(20), "huge");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(),
              HasSubstr("the job's prompts are about 334 tokens, more than "
                        "tenant \"\"'s limit of 30 enqueued prompt tokens"));
  // A refused job leaves nothing behind: its id is free.
  EXPECT_EQ(GetJob("second").status().code(), absl::StatusCode::kNotFound);

  // The limit holds across a restart: the resumed jobs count again.
  RestartServer({{"sim", hanging_.url()}}, Limit(30));
  refused = Create(Questions(4), "second");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("hold 21 of its limit of 30"));

  CancelAndAwaitEnd("first");
  EXPECT_TRUE(Create(Questions(4), "second").ok());
  CancelAndAwaitEnd("small");
  CancelAndAwaitEnd("second");
}

}  // namespace
}  // namespace sdg::testing
