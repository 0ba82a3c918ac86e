// Pipelines end to end: InstructLab pipeline files run by `sdgctl generate
// --pipeline` against sdgd and llmsim (canned replies) as processes.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

const std::string kKnowledge =
    std::string(SDG_SOURCE_DIR) + "/examples/pipelines/knowledge";

class PipelineTest : public StackTest {
 protected:
  void StartWithReplies(const std::string& replies,
                        std::vector<std::string> llmsim_args = {}) {
    llmsim_args.push_back("--replies=" + replies);
    StackOptions options;
    options.llmsim_args = std::move(llmsim_args);
    Start(options);
  }
  std::string Out() const { return stack_->dir() + "/out.jsonl"; }

  // Every event of the job, replayed by a plain gRPC client's WatchJob.
  std::vector<v1::JobEvent> WatchAll(const std::string& job_id) {
    auto stub = v1::GenerationService::NewStub(grpc::CreateChannel(
        stack_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    auto reader = stub->WatchJob(&context, request);
    std::vector<v1::JobEvent> events;
    for (v1::JobEvent event; reader->Read(&event);) events.push_back(event);
    grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return events;
  }

  // pipeline.yaml in the stack's directory: an LLM step "ask" writes a
  // question about each row's topic, a step "judge" (its config followed
  // by `judge_extra`) a verdict on it.
  void WriteAskAndJudge(const std::string& judge_extra) {
    const std::string dir = stack_->dir();
    WriteFile(dir + "/ask.yaml", "generation: \"Ask about {{topic}}.\"\n");
    WriteFile(dir + "/judge.yaml", "generation: \"Judge {{question}}.\"\n");
    WriteFile(dir + "/pipeline.yaml", R"(version: "1.0"
blocks:
  - name: ask
    type: LLMBlock
    config:
      config_path: ask.yaml
      output_cols: [question]
  - name: judge
    type: LLMBlock
    config:
      config_path: judge.yaml
      output_cols: [verdict])" + judge_extra +
                                          "\n");
  }
};

// The example shaped like InstructLab's full/knowledge.yaml: the rows and
// their order are those worked out by hand from InstructLab's semantics for
// these replies (expected.jsonl): the flatten is variable-major, so the
// spell-checked documents' questions come first and the raw document's
// repeated question is the one drop_duplicates removes; the judges' NO and
// score 1 filter two more rows. The same with one row per shard, many in
// parallel.
TEST_F(PipelineTest, KnowledgePipelineGivesInstructLabsRowsInOrder) {
  StartWithReplies(kKnowledge + "/replies.jsonl");
  const std::string expected = ReadFile(kKnowledge + "/expected.jsonl");
  for (const std::vector<std::string>& shape :
       {std::vector<std::string>{}, {"--batch_size=1", "--num_workers=8"}}) {
    std::vector<std::string> args = {
        "generate", "--pipeline=" + kKnowledge + "/pipeline.yaml",
        "--input=" + kKnowledge + "/documents.jsonl", "--output=" + Out()};
    args.insert(args.end(), shape.begin(), shape.end());
    CommandResult result = stack_->Sdgctl(args);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(ReadFile(Out()), expected);
    EXPECT_EQ(ReadFile(Out() + ".errors.jsonl"), "");
    EXPECT_THAT(result.err, HasSubstr("JOB_STATE_SUCCEEDED: 2 seed rows -> " +
                                      Out() + " (2 rows), 0 rows failed"));
    EXPECT_THAT(result.err, HasSubstr("warning: " + kKnowledge +
                                      "/pipeline.yaml: datamixing is not run"));
  }
}

// What a plain gRPC client watching a pipeline's job receives: its results
// name their shard by the stage (the knowledge pipeline's second, after
// gen_knowledge's drop_duplicates) and an index within it, numbered from 0;
// and nothing the server keeps for itself (the rows carried to the barrier)
// arrives, not even as fields the client does not know.
TEST_F(PipelineTest, AWatcherSeesShardsNamedByStageAndIndexOnly) {
  StartWithReplies(kKnowledge + "/replies.jsonl");
  CommandResult result = stack_->Sdgctl(
      {"generate", "--pipeline=" + kKnowledge + "/pipeline.yaml",
       "--input=" + kKnowledge + "/documents.jsonl", "--output=" + Out(),
       "--job_id=staged", "--batch_size=1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;

  std::set<int64_t> result_shards;
  int events = 0;
  for (const v1::JobEvent& event : WatchAll("staged")) {
    ++events;
    EXPECT_TRUE(event.GetReflection()->GetUnknownFields(event).empty())
        << event.DebugString();
    EXPECT_NE(event.event_case(), v1::JobEvent::EVENT_NOT_SET);
    if (!event.has_shard_result()) continue;
    EXPECT_EQ(event.shard_result().stage(), 1);
    result_shards.insert(event.shard_result().shard_index());
  }
  EXPECT_GT(events, 0);
  // One shard per row of the second stage's input, numbered 0, 1, ...
  ASSERT_FALSE(result_shards.empty());
  EXPECT_EQ(*result_shards.begin(), 0);
  EXPECT_EQ(*result_shards.rbegin(),
            static_cast<int64_t>(result_shards.size()) - 1);
}

// A pipeline's tokens, per step and in all: the LLM steps' add up to the
// job's, which equal what llmsim says it reported; the other steps used
// none. GetJob says the same.
TEST_F(PipelineTest, AJobsTokensAreCountedPerStepAndInAll) {
  StartWithReplies(kKnowledge + "/replies.jsonl");
  CommandResult result =
      stack_->Sdgctl({"generate", "--pipeline=" + kKnowledge + "/pipeline.yaml",
                      "--input=" + kKnowledge + "/documents.jsonl",
                      "--output=" + Out(), "--job_id=tokens"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json stats = json::parse(stack_->LlmsimStats());

  v1::JobFinished finished;
  for (const v1::JobEvent& event : WatchAll("tokens")) {
    if (event.has_finished()) finished = event.finished();
  }
  ASSERT_EQ(finished.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_GT(finished.usage().prompt_tokens(), 0);
  EXPECT_EQ(finished.usage().prompt_tokens(), stats["prompt_tokens"]);
  EXPECT_EQ(finished.usage().completion_tokens(), stats["completion_tokens"]);

  const std::set<std::string> llm_steps = {
      "gen_spellcheck", "gen_knowledge", "eval_faithfulness_qa_pair",
      "eval_relevancy_qa_pair", "eval_verify_question"};
  int64_t prompt = 0;
  int64_t completion = 0;
  for (const v1::StepCounts& step : finished.steps()) {
    if (llm_steps.contains(step.step())) {
      EXPECT_GT(step.usage().prompt_tokens(), 0) << step.step();
    } else {
      EXPECT_FALSE(step.has_usage()) << step.step();
    }
    prompt += step.usage().prompt_tokens();
    completion += step.usage().completion_tokens();
  }
  EXPECT_EQ(prompt, finished.usage().prompt_tokens());
  EXPECT_EQ(completion, finished.usage().completion_tokens());

  auto stub = v1::GenerationService::NewStub(grpc::CreateChannel(
      stack_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::GetJobRequest get;
  get.set_job_id("tokens");
  v1::Job job;
  ASSERT_TRUE(stub->GetJob(&context, get, &job).ok());
  EXPECT_EQ(job.usage().SerializeAsString(),
            finished.usage().SerializeAsString());
}

// The estimate counts the pipeline's first LLM step from the seed rows as
// the run then reports it, and says the later steps are not known before
// the run (their prompts hold generated text).
TEST_F(PipelineTest, AnEstimateCountsTheFirstLlmStepAsTheRunReportsIt) {
  StartWithReplies(kKnowledge + "/replies.jsonl");
  const std::vector<std::string> job = {
      "--pipeline=" + kKnowledge + "/pipeline.yaml",
      "--input=" + kKnowledge + "/documents.jsonl"};
  std::vector<std::string> args = {"estimate"};
  args.insert(args.end(), job.begin(), job.end());
  CommandResult estimate = stack_->Sdgctl(args);
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  const std::string out = estimate.out;
  // The counted step's line: `step 1 "gen_spellcheck" (backend "sim", model
  // M, n 1): 2 rows, R requests, P prompt tokens (counted by the backend's
  // tokenizer), ...`; P is what the run must report.
  const size_t line = out.find("step 1 \"gen_spellcheck\" (backend \"sim\"");
  ASSERT_NE(line, std::string::npos) << out;
  const std::string step_line = out.substr(line, out.find('\n', line) - line);
  EXPECT_THAT(step_line, HasSubstr(", n 1): 2 rows, "));
  const std::string kCounted =
      " prompt tokens (counted by the backend's tokenizer)";
  const size_t tokens_end = step_line.find(kCounted);
  ASSERT_NE(tokens_end, std::string::npos) << step_line;
  const size_t tokens_start = step_line.rfind(' ', tokens_end - 1) + 1;
  int64_t counted_tokens = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      step_line.substr(tokens_start, tokens_end - tokens_start),
      &counted_tokens))
      << step_line;
  for (const char* later : {"gen_knowledge", "eval_faithfulness_qa_pair",
                            "eval_relevancy_qa_pair", "eval_verify_question"}) {
    EXPECT_THAT(out, ::testing::ContainsRegex(std::string(later) +
                                              ".*: not known before the run"));
  }
  EXPECT_THAT(out, HasSubstr("later ones depend on generated text"));
  EXPECT_EQ(json::parse(stack_->LlmsimStats())["requests"], 0);

  args = {"generate", "--output=" + Out(), "--job_id=estimated"};
  args.insert(args.end(), job.begin(), job.end());
  CommandResult run = stack_->Sdgctl(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  v1::JobFinished finished;
  for (const v1::JobEvent& event : WatchAll("estimated")) {
    if (event.has_finished()) finished = event.finished();
  }
  bool found = false;
  for (const v1::StepCounts& step : finished.steps()) {
    if (step.step() != "gen_spellcheck") continue;
    found = true;
    EXPECT_EQ(step.usage().prompt_tokens(), counted_tokens);
  }
  EXPECT_TRUE(found);
}

// A step whose requests fail (the model does not exist) sends each of its
// rows to the errors file with the step's name; the steps before it ran.
TEST_F(PipelineTest, AFailingStepSendsItsRowsToTheErrorsFile) {
  Start();
  const std::string dir = stack_->dir();
  WriteFile(dir + "/seeds.jsonl",
            "{\"topic\": \"moons\"}\n{\"topic\": \"rivers\"}\n");
  WriteAskAndJudge("\n      gen_kwargs:\n        model: no-such-model");
  CommandResult result =
      stack_->Sdgctl({"generate", "--pipeline=" + dir + "/pipeline.yaml",
                      "--input=" + dir + "/seeds.jsonl", "--output=" + Out()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(ReadFile(Out()), "");
  std::vector<json> errors = JsonLines(ReadFile(Out() + ".errors.jsonl"));
  ASSERT_EQ(errors.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(errors[i]["row_index"], i);
    EXPECT_EQ(errors[i]["step"], "judge");
    EXPECT_EQ(errors[i]["code"], "NOT_FOUND");
    EXPECT_THAT(errors[i]["message"].get<std::string>(),
                HasSubstr("no-such-model"));
  }
  EXPECT_THAT(result.err, HasSubstr("JOB_STATE_FAILED"));
  EXPECT_THAT(result.err, HasSubstr("2 rows failed at their steps"));
}

// A bad pipeline file is refused before anything is sent, naming the file,
// the block and the key.
TEST_F(PipelineTest, AnUnknownBlockTypeIsRefusedNamingTheBlock) {
  Start();
  const std::string dir = stack_->dir();
  WriteFile(dir + "/seeds.jsonl", "{\"topic\": \"moons\"}\n");
  WriteFile(dir + "/pipeline.yaml", R"(version: "1.0"
blocks:
  - name: pick
    type: SelectorBlock
    config:
      choice_map: {}
)");
  CommandResult result =
      stack_->Sdgctl({"generate", "--pipeline=" + dir + "/pipeline.yaml",
                      "--input=" + dir + "/seeds.jsonl", "--output=" + Out()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err,
              HasSubstr(dir + "/pipeline.yaml: block 0 (pick): type: unknown "
                              "or unsupported block type \"SelectorBlock\""));
  CommandResult jobs = stack_->Sdgctl({"jobs"});
  EXPECT_THAT(jobs.out, ::testing::Not(HasSubstr("sdgctl-")));
}

// Cancelling a job while its second step's request hangs ends it CANCELLED
// at once: the hung request is aborted, and what the first step did is not
// reported as output.
TEST_F(PipelineTest, CancellingMidPipelineEndsTheJobCancelled) {
  // The first request (step "ask") is answered; the second (step "judge")
  // never is.
  StackOptions options;
  options.llmsim_args = {"--fault_script=ok,hang"};
  Start(options);
  const std::string dir = stack_->dir();
  WriteFile(dir + "/seeds.jsonl", "{\"topic\": \"moons\"}\n");
  WriteAskAndJudge("");
  CommandResult submitted =
      stack_->Sdgctl({"submit", "--pipeline=" + dir + "/pipeline.yaml",
                      "--input=" + dir + "/seeds.jsonl", "--job_id=mid"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  ASSERT_TRUE(Eventually([&] {
    return json::parse(stack_->LlmsimStats())["hung"].get<int64_t>() == 1;
  }));
  CommandResult cancelled = stack_->Sdgctl({"cancel", "mid"});
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
  CommandResult watched = stack_->Sdgctl({"watch", "mid"});
  EXPECT_THAT(watched.err, HasSubstr("JOB_STATE_CANCELLED"));
  EXPECT_TRUE(Eventually([&] {
    return json::parse(stack_->LlmsimStats())["in_flight"].get<int64_t>() == 0;
  }));
  CommandResult output = stack_->Sdgctl({"output", "mid", "-o", Out()});
  EXPECT_EQ(ReadFile(Out()), "");
  std::vector<json> errors = JsonLines(ReadFile(Out() + ".errors.jsonl"));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["code"], "CANCELLED");
  EXPECT_EQ(errors[0]["step"], "ask");
}

// sdgd killed once the first stage (up to gen_knowledge's drop_duplicates)
// is committed and the first judge's request hangs: the new sdgd rebuilds
// the second stage from the rows the log holds, asks only the judges again,
// and sdgctl, following through the restart, writes the same rows.
TEST_F(PipelineTest, AJobKilledPastItsBarrierResumesFromTheCommittedRows) {
  // llmsim batches (vLLM mode): one request per step for the job's one
  // shard of 2 documents. Requests 1 and 2 are the first stage's; the
  // third, the first judge's, hangs.
  StartWithReplies(kKnowledge + "/replies.jsonl",
                   {"--fault_script=ok,ok,hang"});
  auto client = stack_->StartSdgctl(
      {"generate", "--pipeline=" + kKnowledge + "/pipeline.yaml",
       "--input=" + kKnowledge + "/documents.jsonl", "--output=" + Out(),
       "--job_id=knowledge"},
      stack_->dir() + "/generate.stderr");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(Eventually([&] {
    return json::parse(stack_->LlmsimStats())["hung"].get<int64_t>() == 1;
  }));
  int64_t prompts_before = -1;
  absl::StatusOr<int> killed = stack_->RestartSdgd(SIGKILL, [&] {
    json stats;
    if (Eventually([&] {
          stats = json::parse(stack_->LlmsimStats());
          return stats["in_flight"].get<int64_t>() == 0;
        })) {
      prompts_before = stats["prompts"].get<int64_t>();
    }
  });
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ((*client)->Wait(), 0)
      << ReadFile(stack_->dir() + "/generate.stderr");
  EXPECT_EQ(ReadFile(Out()), ReadFile(kKnowledge + "/expected.jsonl"));
  EXPECT_THAT(stack_->SdgdLog(),
              HasSubstr("\"msg\":\"pipeline stage input complete\""));
  // Before: spellcheck's 2 prompts and gen_knowledge's 4. After: the
  // judges' 4, 3 and 2 (each filter keeps fewer), and nothing else.
  EXPECT_EQ(prompts_before, 2 + 4);
  EXPECT_EQ(json::parse(stack_->LlmsimStats())["prompts"].get<int64_t>() -
                prompts_before,
            4 + 3 + 2);
}

}  // namespace
}  // namespace sdg::testing
