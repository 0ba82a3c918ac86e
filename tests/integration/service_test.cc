// The service in-process against llmsim's HTTP server on a free loopback port:
// real gRPC, real HTTP, no mocks.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "tests/integration/service_fixture.h"
#include "tests/testing/latched_store.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

using testing::Events;
using testing::SimThread;

class ServiceTest : public testing::ServiceFixture {
 protected:
  void StartServer(std::vector<std::string> urls) {
    std::vector<std::pair<std::string, std::string>> backends;
    for (size_t i = 0; i < urls.size(); ++i) {
      backends.emplace_back(i == 0 ? "sim" : "other", urls[i]);
    }
    ServiceFixture::StartServer(backends);
  }

  SimThread sim_;
};

TEST_F(ServiceTest, StreamsEveryRowBetweenStartedAndFinished) {
  StartServer({sim_.url()});
  Events events = Run(Request(20));
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  ASSERT_GE(events.all.size(), 2u);
  ASSERT_TRUE(events.all.front().has_started());
  EXPECT_EQ(events.all.front().started().total_rows(), 20);
  EXPECT_EQ(events.all.front().started().total_shards(), 7);
  EXPECT_EQ(events.all.front().started().batch_size(), 3);
  EXPECT_EQ(events.all.front().started().num_workers(), 4);
  ASSERT_TRUE(events.all.back().has_finished());
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(events.Finished().rows_succeeded(), 20);
  EXPECT_EQ(events.Finished().shards_succeeded(), 7);

  std::vector<v1::ResultRow> rows = events.Rows();
  ASSERT_EQ(rows.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(rows[i].row_index(), i);
    EXPECT_EQ(rows[i].columns().fields().at("output").string_value(),
              "sim(0): Q" + std::to_string(i) + ": why " + std::to_string(i));
    EXPECT_EQ(rows[i].columns().fields().at("question").string_value(),
              "why " + std::to_string(i));
    EXPECT_EQ(rows[i].finish_reason(), "stop");
  }
}

TEST_F(ServiceTest, ChatSendsTheRenderedPromptAsTheUserMessage) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest request = Request(5);
  request.mutable_block()->set_api(v1::API_CHAT);
  request.mutable_block()->set_system_prompt("You are terse.");
  request.mutable_block()->set_output_column("answer");
  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<v1::ResultRow> rows = events.Rows();
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[4].columns().fields().at("answer").string_value(),
            "sim(0): Q4: why 4");
}

TEST_F(ServiceTest, NSamplesGiveNRowsPerInputRow) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest request = Request(4);
  request.mutable_block()->set_n(3);
  request.mutable_block()->set_max_tokens(2);
  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<v1::ResultRow> rows = events.Rows();
  ASSERT_EQ(rows.size(), 12u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(rows[3 * 3 + s].row_index(), 3);
    EXPECT_EQ(rows[3 * 3 + s].sample_index(), s);
    // max_tokens 2 keeps "sim(s):" and the first prompt word.
    EXPECT_EQ(rows[3 * 3 + s].columns().fields().at("output").string_value(),
              "sim(" + std::to_string(s) + "): Q3:");
    EXPECT_EQ(rows[3 * 3 + s].finish_reason(), "length");
  }
}

TEST_F(ServiceTest, UnknownBackendIsInvalidArgument) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest request = Request(2);
  request.mutable_block()->set_backend("gpt");
  Events events = Run(request);
  EXPECT_EQ(events.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(events.status.error_message(),
            "block.backend: unknown backend \"gpt\"; this server has: sim");
  EXPECT_TRUE(events.all.empty());
}

TEST_F(ServiceTest, MissingColumnIsInvalidArgumentNamingIt) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest request = Request(3);
  request.mutable_block()->set_prompt_template("{{context}}");
  Events events = Run(request);
  EXPECT_EQ(events.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(events.status.error_message(),
            "block.prompt_template: column \"context\" is missing from row 0");
}

TEST_F(ServiceTest, DeadBackendGivesShardErrorsAndTheCallStillSucceeds) {
  // Port 1 on loopback: nothing listens, connections are refused. No
  // waiting out the outage: the retry rules alone decide.
  backend_defaults_.outage.limit = absl::ZeroDuration();
  StartServer({sim_.url(), "http://127.0.0.1:1/v1"});
  v1::GenerateJobRequest request = Request(7);
  request.mutable_block()->set_backend("other");
  Events events = Run(request);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  std::vector<v1::ShardError> errors = events.Errors();
  ASSERT_EQ(errors.size(), 3u);
  int64_t rows = 0;
  for (const v1::ShardError& error : errors) {
    EXPECT_EQ(error.code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    EXPECT_EQ(error.attempts(), 3);
    EXPECT_THAT(error.message(), HasSubstr("127.0.0.1"));
    rows += error.row_count();
  }
  EXPECT_EQ(rows, 7);
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(events.Finished().rows_failed(), 7);
  EXPECT_EQ(
      events.Finished().reason(),
      "7 of 7 rows failed (in 3 of 3 shards); see the shard_error events");
}

TEST_F(ServiceTest, AnEmptyModelIsTheBackendsOnlyModel) {
  StartServer({sim_.url(), "http://127.0.0.1:1/v1"});
  ASSERT_TRUE(testing::Eventually([&] {
    // Detection runs at start; until it ends the model is not known.
    v1::GenerateJobRequest probe = Request(1);
    probe.mutable_block()->clear_model();
    return Run(probe).status.ok();
  }));
  v1::GenerateJobRequest request = Request(3);
  request.mutable_block()->clear_model();
  Events events = Run(request);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_EQ(events.Rows().size(), 3u);
  absl::StatusOr<v1::Job> job = GetJob(events.all.front().job_id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->block().model(), "m");  // what llmsim lists

  // A backend that never listed its models: the caller must name one.
  request.mutable_block()->set_backend("other");
  events = Run(request);
  EXPECT_EQ(events.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(events.status.error_message(),
            "block.model: empty, and backend \"other\" has not listed its "
            "models (/v1/models); name the model");
}

// A request protobuf cannot parse is the caller's mistake, said as such (not
// gRPC's generated UNIMPLEMENTED or INTERNAL with no message).
TEST_F(ServiceTest, ARequestThatDoesNotDecodeIsInvalidArgumentSayingWhy) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest bad_utf8 = Request(1);
  bad_utf8.set_job_id("\xff\xfe");  // proto3 strings must be UTF-8
  v1::GenerateJobRequest too_deep = Request(1);
  google::protobuf::Value* value =
      &(*too_deep.mutable_rows(0)->mutable_fields())["deep"];
  for (int i = 0; i < 200; ++i) {
    value = &(*value->mutable_struct_value()->mutable_fields())["x"];
  }
  // A row is decoded when it is stored, and named by its index.
  for (const auto& [request, message] :
       {std::pair{bad_utf8, "the GenerateJobRequest could not be decoded"},
        std::pair{
            too_deep,
            "rows[0]: not a valid google.protobuf.Struct (is a string "
            "not UTF-8, or are values nested deeper than 100 levels?)"}}) {
    Events events = Run(request);
    EXPECT_EQ(events.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(events.status.error_message(), HasSubstr(message));
    EXPECT_TRUE(events.all.empty());

    grpc::ClientContext context;
    v1::Job job;
    grpc::Status status = stub_->CreateJob(&context, request, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(message));
  }
  // EstimateJob decodes the whole request, rows and all, as it arrives.
  for (const v1::GenerateJobRequest& request : {bad_utf8, too_deep}) {
    grpc::ClientContext context;
    v1::JobEstimate estimate;
    grpc::Status status = stub_->EstimateJob(&context, request, &estimate);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr("the GenerateJobRequest could not be decoded"));
  }
  grpc::ClientContext context;
  v1::WatchJobRequest watch;
  watch.set_job_id("\xff");
  auto reader = stub_->WatchJob(&context, watch);
  v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("the WatchJobRequest could not be decoded"));
  // The server goes on serving.
  EXPECT_TRUE(Run(Request(2)).status.ok());
}

TEST_F(ServiceTest, AnUnknownHugeJobIdIsNamedByItsFirstBytes) {
  StartServer({sim_.url()});
  absl::StatusOr<v1::Job> job = GetJob(std::string(1 << 20, 'j'));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      job.status().message(),
      HasSubstr("no job \"" + std::string(64, 'j') + "...\" (1048576 bytes)"));
  EXPECT_LT(job.status().message().size(), 200u);
}

TEST_F(ServiceTest, SameJobIdAttachesAndAnotherRequestIsAlreadyExists) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest request = Request(3);
  request.set_job_id("same");
  Events first = Run(request);
  ASSERT_EQ(first.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  // The same request again: the same job's events, not a second job.
  Events again = Run(request);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  ASSERT_EQ(again.all.size(), first.all.size());
  for (size_t i = 0; i < first.all.size(); ++i) {
    EXPECT_EQ(again.all[i].sequence(), i + 1);
    EXPECT_TRUE(testing::SameEvent(again.all[i], first.all[i]));
  }
  EXPECT_EQ(sim_.Stats()["requests"], 3);
  // Another request under that id is refused, naming it.
  request.mutable_block()->set_max_tokens(7);
  Events other = Run(request);
  EXPECT_EQ(other.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(other.status.error_message(), HasSubstr("\"same\""));
}

TEST_F(ServiceTest, GetAndListShowAFinishedJob) {
  StartServer({sim_.url()});
  v1::GenerateJobRequest request = Request(4);
  request.set_job_id("job-a");
  request.mutable_block()->set_name("answers");
  ASSERT_EQ(Run(request).Finished().state(), v1::JOB_STATE_SUCCEEDED);

  grpc::ClientContext get_context;
  v1::GetJobRequest get;
  get.set_job_id("job-a");
  v1::Job job;
  ASSERT_TRUE(stub_->GetJob(&get_context, get, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.rows_succeeded(), 4);
  EXPECT_EQ(job.block_name(), "answers");
  EXPECT_EQ(job.backend(), "sim");
  EXPECT_GT(job.end_time().seconds(), 0);

  grpc::ClientContext list_context;
  v1::ListJobsResponse list;
  ASSERT_TRUE(
      stub_->ListJobs(&list_context, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).job_id(), "job-a");
}

// A store write that stalls (a disk that hangs) holds up only the call that
// made it: while one job's record waits to be added, another job is
// created, run to its end, read and listed. And no record write runs on a
// gRPC thread: admission writes on sdgd's blocking threads, a job's end on
// the worker that ended it.
TEST_F(ServiceTest, AStalledStoreWriteHoldsUpOnlyItsOwnCall) {
  auto store = std::make_shared<testing::LatchedStore>();
  ServerOptions options;
  options.store = store;
  ServiceFixture::StartServer({{"sim", sim_.url()}}, options);
  store->ShutFor("stalled");
  v1::GenerateJobRequest stalled = Request(2);
  stalled.set_job_id("stalled");
  grpc::Status stalled_status;
  std::thread creator([&] {
    grpc::ClientContext context;
    v1::Job job;
    stalled_status = stub_->CreateJob(&context, stalled, &job);
  });
  store->AwaitWaiting();

  v1::GenerateJobRequest other = Request(4);
  other.set_job_id("other");
  EXPECT_EQ(Run(other).Finished().state(), v1::JOB_STATE_SUCCEEDED);
  absl::StatusOr<v1::Job> got = GetJob("other");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->rows_succeeded(), 4);
  grpc::ClientContext list_context;
  v1::ListJobsResponse list;
  ASSERT_TRUE(
      stub_->ListJobs(&list_context, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);  // "stalled" is not admitted yet
  EXPECT_EQ(list.jobs(0).job_id(), "other");

  store->Open();
  creator.join();
  EXPECT_TRUE(stalled_status.ok()) << stalled_status.error_message();
  EXPECT_TRUE(GetJob("stalled").ok());
  EXPECT_THAT(store->WriterThreads(),
              ::testing::Each(::testing::AnyOf("sdg-blocking", "sdg-worker")));
}

// Reads of jobs in memory never wait for the store: with every blocking
// thread held by a stalled admission, a finished job is still found,
// described, listed, watched and cancelled (a no-op) at once.
TEST_F(ServiceTest, ReadsOfJobsInMemoryDoNotQueueBehindStalledWrites) {
  auto store = std::make_shared<testing::LatchedStore>();
  ServerOptions options;
  options.store = store;
  ServiceFixture::StartServer({{"sim", sim_.url()}}, options);
  v1::GenerateJobRequest done = Request(3);
  done.set_job_id("done");
  ASSERT_EQ(Run(done).Finished().state(), v1::JOB_STATE_SUCCEEDED);

  std::vector<std::thread> creators;
  for (int i = 0; i < options.blocking_threads; ++i) {
    const std::string id = absl::StrCat("stalled-", i);
    store->ShutFor(id);
    creators.emplace_back([this, id] {
      v1::GenerateJobRequest stalled = Request(1);
      stalled.set_job_id(id);
      grpc::ClientContext context;
      v1::Job job;
      EXPECT_TRUE(stub_->CreateJob(&context, stalled, &job).ok());
    });
  }
  absl::Cleanup release = [&] {
    store->Open();
    for (std::thread& creator : creators) creator.join();
  };
  store->AwaitWaiting(options.blocking_threads);

  // Each call fails at its deadline, rather than hanging, if it waits.
  auto with_deadline = [](grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
  };
  grpc::ClientContext get_context;
  with_deadline(get_context);
  v1::GetJobRequest get;
  get.set_job_id("done");
  v1::Job job;
  grpc::Status got = stub_->GetJob(&get_context, get, &job);
  ASSERT_TRUE(got.ok()) << got.error_message();
  EXPECT_EQ(job.rows_succeeded(), 3);

  grpc::ClientContext list_context;
  with_deadline(list_context);
  v1::ListJobsResponse list;
  grpc::Status listed =
      stub_->ListJobs(&list_context, v1::ListJobsRequest(), &list);
  ASSERT_TRUE(listed.ok()) << listed.error_message();
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).job_id(), "done");

  grpc::ClientContext cancel_context;
  with_deadline(cancel_context);
  v1::CancelJobRequest cancel;
  cancel.set_job_id("done");
  grpc::Status cancelled = stub_->CancelJob(&cancel_context, cancel, &job);
  ASSERT_TRUE(cancelled.ok()) << cancelled.error_message();
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);

  grpc::ClientContext watch_context;
  with_deadline(watch_context);
  v1::WatchJobRequest watch;
  watch.set_job_id("done");
  auto reader = stub_->WatchJob(&watch_context, watch);
  v1::JobEvent event;
  int events = 0;
  while (reader->Read(&event)) ++events;
  grpc::Status watched = reader->Finish();
  ASSERT_TRUE(watched.ok()) << watched.error_message();
  EXPECT_TRUE(event.has_finished());
  EXPECT_GT(events, 2);
}

TEST_F(ServiceTest, UnknownJobIsNotFound) {
  StartServer({sim_.url()});
  for (int rpc = 0; rpc < 2; ++rpc) {
    grpc::ClientContext context;
    v1::Job job;
    grpc::Status status;
    if (rpc == 0) {
      v1::GetJobRequest request;
      request.set_job_id("nope");
      status = stub_->GetJob(&context, request, &job);
    } else {
      v1::CancelJobRequest request;
      request.set_job_id("nope");
      status = stub_->CancelJob(&context, request, &job);
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(status.error_message(), HasSubstr("no job \"nope\""));
  }
}

TEST_F(ServiceTest, MetricsCountTheJobJustRun) {
  StartServer({sim_.url()});
  ASSERT_EQ(Run(Request(10)).Finished().state(), v1::JOB_STATE_SUCCEEDED);
  auto scrape = testing::HttpGet(
      "http://127.0.0.1:" + std::to_string(server_->metrics_port()) +
      "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  using testing::MetricValue;
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_jobs_total{state="succeeded"})"), 1);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_rows_total{outcome="succeeded"})"), 10);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_rows_total{outcome="failed"})"), 0);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_shards_total{outcome="succeeded"})"),
            4);
  EXPECT_EQ(
      MetricValue(*scrape,
                  R"(sdg_backend_requests_total{backend="sim",code="200"})"),
      10);
  EXPECT_EQ(MetricValue(*scrape, "sdg_jobs_active"), 0);
  EXPECT_EQ(MetricValue(*scrape, "sdg_workers_busy"), 0);
  EXPECT_EQ(MetricValue(*scrape, "sdg_shards_queued"), 0);
}

}  // namespace
}  // namespace sdg
