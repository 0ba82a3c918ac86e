// End to end, as an operator runs it: llmsim and sdgd as processes on free
// loopback ports, driven by sdgctl and by plain gRPC clients.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_get.h"
#include "tests/testing/subprocess.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

class EndToEndTest : public StackTest {
 protected:
  // A dataset of `rows` questions with an id column.
  std::string WriteDataset(int rows) {
    std::string path = stack_->dir() + "/in.jsonl";
    std::string text;
    for (int i = 0; i < rows; ++i) {
      text += json{{"id", i},
                   {"question", "What is item " + std::to_string(i) + "?"}}
                  .dump() +
              "\n";
    }
    WriteFile(path, text);
    return path;
  }

  std::string Out() const { return stack_->dir() + "/out.jsonl"; }
};

// Large rows times many samples: sdgctl asks for the output column only and
// joins it with its input, so no message it receives repeats the input; the
// lines it writes still carry every input column.
TEST_F(EndToEndTest, LargeRowsWithManySamplesAreJoinedWithTheInput) {
  Start();
  const std::string in = stack_->dir() + "/big.jsonl";
  const std::string context(144 << 10, 'c');
  std::string text;
  for (int i = 0; i < 4; ++i) {
    text += json{{"id", i}, {"context", context}}.dump() + "\n";
  }
  WriteFile(in, text);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template=Summarize.", "--n=32", "--max_tokens=4", "--job_id=big"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<json> lines = JsonLines(ReadFile(Out()));
  ASSERT_EQ(lines.size(), 4u * 32);
  EXPECT_EQ(lines[127]["id"], 3);
  EXPECT_EQ(lines[127]["context"].get<std::string>().size(), context.size());
  EXPECT_TRUE(lines[127].contains("output"));
  // What sdgd stored for the job: the output column only.
  result = stack_->Sdgctl({"output", "big", "-o", stack_->dir() + "/big.out"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<json> stored = JsonLines(ReadFile(stack_->dir() + "/big.out"));
  ASSERT_EQ(stored.size(), 4u * 32);
  EXPECT_EQ(stored[0].size(), 1u) << stored[0].dump();
  EXPECT_TRUE(stored[0].contains("output"));
}

TEST_F(EndToEndTest, HundredRowsComeBackInInputOrder) {
  Start();
  std::string in = WriteDataset(100);
  CommandResult result =
      stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                      "--model=m", "--template=Answer briefly. {{question}}",
                      "--batch_size=8", "--num_workers=4"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<json> lines = JsonLines(ReadFile(Out()));
  ASSERT_EQ(lines.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(lines[i]["id"], i);
    EXPECT_EQ(lines[i]["output"], "sim(0): Answer briefly. What is item " +
                                      std::to_string(i) + "?");
  }
  EXPECT_THAT(result.err,
              HasSubstr("JOB_STATE_SUCCEEDED: 100/100 rows generated"));
  EXPECT_EQ(ReadFile(Out() + ".errors.jsonl"), "");
}

TEST_F(EndToEndTest, SubmitWatchOutputDeleteOfADetachedJob) {
  Start();
  std::string in = WriteDataset(30);
  CommandResult submitted = stack_->Sdgctl(
      {"submit", "--input=" + in, "--model=m", "--template={{question}}",
       "--batch_size=4", "--job_id=detached-job"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "detached-job\n");

  CommandResult watched = stack_->Sdgctl({"watch", "detached-job"});
  EXPECT_EQ(watched.exit_code, 0) << watched.err;
  EXPECT_THAT(watched.err, HasSubstr("JOB_STATE_SUCCEEDED: 30 rows generated"));

  CommandResult output =
      stack_->Sdgctl({"output", "detached-job", "-o", Out()});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  std::vector<json> lines = JsonLines(ReadFile(Out()));
  ASSERT_EQ(lines.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    // Without the input file: the columns sdgd returns, keys sorted.
    EXPECT_EQ(
        lines[i].dump(),
        json({{"id", i},
              {"output", "sim(0): What is item " + std::to_string(i) + "?"},
              {"question", "What is item " + std::to_string(i) + "?"}})
            .dump());
  }
  EXPECT_EQ(ReadFile(Out() + ".errors.jsonl"), "");

  CommandResult listed = stack_->Sdgctl({"jobs", "--state=succeeded"});
  EXPECT_THAT(listed.out, HasSubstr("detached-job"));
  CommandResult deleted = stack_->Sdgctl({"delete", "detached-job"});
  EXPECT_EQ(deleted.exit_code, 0) << deleted.err;
  CommandResult gone = stack_->Sdgctl({"get", "detached-job"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_THAT(gone.err, HasSubstr("NOT_FOUND"));
}

TEST_F(EndToEndTest, ChatApiWithABlockFile) {
  Start();
  std::string in = WriteDataset(10);
  std::string block = stack_->dir() + "/block.json";
  WriteFile(block, R"({"name": "qa", "model": "m", "api": "API_CHAT",
      "system_prompt": "You answer questions.",
      "prompt_template": "{{question}}", "output_column": "answer"})");
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--block=" + block});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<json> lines = JsonLines(ReadFile(Out()));
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[9]["answer"], "sim(0): What is item 9?");
  EXPECT_FALSE(lines[9].contains("output"));
}

TEST_F(EndToEndTest, ThreeSamplesPerRowInSampleOrder) {
  Start();
  std::string in = WriteDataset(5);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--n=3", "--batch_size=2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<json> lines = JsonLines(ReadFile(Out()));
  ASSERT_EQ(lines.size(), 15u);
  for (int row = 0; row < 5; ++row) {
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(lines[row * 3 + s]["output"], "sim(" + std::to_string(s) +
                                                  "): What is item " +
                                                  std::to_string(row) + "?");
    }
  }
}

TEST_F(EndToEndTest, UnknownBackendIsInvalidArgument) {
  Start();
  std::string in = WriteDataset(3);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--backend=nope"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(
      result.err,
      HasSubstr("INVALID_ARGUMENT: block.backend: unknown backend \"nope\""));
}

TEST_F(EndToEndTest, MissingColumnIsInvalidArgumentNamingIt) {
  Start();
  std::string in = WriteDataset(3);
  CommandResult result =
      stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                      "--model=m", "--template={{context}} {{question}}"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err,
              HasSubstr("INVALID_ARGUMENT: block.prompt_template: column "
                        "\"context\" is missing from row 0"));
}

TEST_F(EndToEndTest, BadInputFileIsReportedBeforeAnythingIsSent) {
  Start();
  std::string in = stack_->dir() + "/bad.jsonl";
  WriteFile(in, "{\"question\": \"ok\"}\n\"just a string\"\n");
  CommandResult result =
      stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                      "--model=m", "--template={{question}}"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err,
              HasSubstr(in + ":2: expected a JSON object, got a string"));
  auto stats = HttpGet(stack_->llmsim_url() + "/stats");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(json::parse(*stats)["requests"], 0);
}

TEST_F(EndToEndTest, DeadBackendFillsTheErrorFile) {
  StackOptions options;
  options.extra_backends = {"dead=http://127.0.0.1:1/v1"};
  options.sdgd_args = {"--backend_max_attempts=1", "--backend_outage_limit=0"};
  Start(options);
  std::string in = WriteDataset(6);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--backend=dead", "--batch_size=4"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("JOB_STATE_FAILED: 0/6 rows generated"));
  EXPECT_EQ(ReadFile(Out()), "");
  std::vector<json> errors = JsonLines(ReadFile(Out() + ".errors.jsonl"));
  ASSERT_EQ(errors.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(errors[i]["row_index"], i);
    EXPECT_EQ(errors[i]["code"], "UNAVAILABLE");
    EXPECT_EQ(errors[i]["row"]["id"], i);
  }
}

TEST_F(EndToEndTest, OutputDoesNotDependOnConcurrency) {
  Start();
  std::string in = WriteDataset(200);
  std::string reference;
  for (const char* workers : {"1", "4", "32"}) {
    for (const char* batch : {"1", "8"}) {
      CommandResult result =
          stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                          "--model=m", "--template=Q: {{question}}", "--n=2",
                          std::string("--num_workers=") + workers,
                          std::string("--batch_size=") + batch});
      ASSERT_EQ(result.exit_code, 0) << result.err;
      std::string output = ReadFile(Out());
      if (reference.empty()) reference = output;
      EXPECT_EQ(output, reference)
          << "num_workers " << workers << ", batch_size " << batch;
    }
  }
  EXPECT_EQ(JsonLines(reference).size(), 400u);
}

TEST_F(EndToEndTest, ReflectionListsTheService) {
  Start();
  auto channel = grpc::CreateChannel(stack_->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& service : response.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services, ::testing::Contains("sdg.v1.GenerationService"));
  EXPECT_THAT(services, ::testing::Contains("grpc.health.v1.Health"));
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(EndToEndTest, HealthSaysServing) {
  Start();
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      stack_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(stub->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(EndToEndTest, MetricsMatchTheJobJustRun) {
  Start();
  std::string in = WriteDataset(12);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--batch_size=5"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto scrape = HttpGet(stack_->metrics_url());
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_jobs_total{state="succeeded"})"), 1);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_rows_total{outcome="succeeded"})"), 12);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_shards_total{outcome="succeeded"})"),
            3);
  // llmsim says it is vLLM, so each shard's prompts went as one request.
  EXPECT_EQ(
      MetricValue(*scrape,
                  R"(sdg_backend_requests_total{backend="sim",code="200"})"),
      3);
  EXPECT_EQ(
      MetricValue(*scrape, R"(sdg_generation_tokens_total{backend="sim"})"),
      12 * 5);  // "sim(0): What is item N?" is 5 tokens
}

// What a job consumed: the backend's own `usage`, summed over the job's
// committed shards, in GetJob, in `sdgctl jobs`, in sdgctl's summary and in
// the metrics, all equal to what llmsim says it reported. And a job shorter
// than a second shows rates over its whole run, never a rate of 0.
TEST_F(EndToEndTest, AJobCountsTheTokensTheBackendReported) {
  Start();
  std::string in = WriteDataset(12);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--batch_size=5", "--job_id=counted"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json stats = json::parse(stack_->LlmsimStats());
  // "What is item N?" is 4 tokens, "sim(0): What is item N?" 5.
  ASSERT_EQ(stats["prompt_tokens"], 12 * 4);
  ASSERT_EQ(stats["completion_tokens"], 12 * 5);

  EXPECT_THAT(result.err, HasSubstr("tokens: 48 prompt + 60 completion"));
  EXPECT_THAT(result.err, ::testing::ContainsRegex(
                              R"(s \([0-9.]+ rows/s, [0-9]+ tokens/s\))"));
  EXPECT_THAT(result.err, ::testing::Not(HasSubstr(" 0.0 rows/s")));

  CommandResult get = stack_->Sdgctl({"get", "counted"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  // (int64 fields are strings in protobuf's JSON.)
  EXPECT_EQ(json::parse(get.out)["usage"]["prompt_tokens"], "48");
  EXPECT_EQ(json::parse(get.out)["usage"]["completion_tokens"], "60");

  CommandResult jobs = stack_->Sdgctl({"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("PROMPT_TOKENS OUTPUT_TOKENS"));
  EXPECT_THAT(jobs.out, ::testing::ContainsRegex(
                            "counted +SUCCEEDED +- +12 +12 +0 +48 +60 +0  "));

  auto scrape = HttpGet(stack_->metrics_url());
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_prompt_tokens_total{backend="sim"})"),
            48);
  EXPECT_EQ(
      MetricValue(*scrape, R"(sdg_generation_tokens_total{backend="sim"})"),
      60);
}

// sdgctl estimate (and generate --dry_run) says what a job would take before
// it runs, sending nothing to the model and creating no job; the run then
// sends the requests and reports the prompt tokens it said.
TEST_F(EndToEndTest, SdgctlEstimatesAJobBeforeItRuns) {
  Start();
  const std::vector<std::string> job = {"--input=" + WriteDataset(12),
                                        "--model=m", "--template={{question}}",
                                        "--batch_size=5", "--max_tokens=5"};
  auto with = [&job](std::vector<std::string> args) {
    args.insert(args.end(), job.begin(), job.end());
    return args;
  };
  CommandResult estimate = stack_->Sdgctl(with({"estimate", "--price=1/2"}));
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  // vLLM takes each shard of 5 as one request: 3 of them.
  EXPECT_THAT(estimate.out,
              HasSubstr("estimate: 12 rows, 3 requests, 48 prompt tokens, at "
                        "most 60 completion tokens\n"));
  EXPECT_THAT(estimate.out, HasSubstr("(counted by the backend's tokenizer)"));
  EXPECT_THAT(estimate.out, HasSubstr("cost at $1/$2 per million tokens: from "
                                      "$0.000048 to $0.000168"));
  json stats = json::parse(stack_->LlmsimStats());
  EXPECT_EQ(stats["requests"], 0);
  EXPECT_EQ(stats["tokenize_requests"], 12);

  CommandResult dry_run =
      stack_->Sdgctl(with({"generate", "--dry_run", "--output=" + Out()}));
  ASSERT_EQ(dry_run.exit_code, 0) << dry_run.err;
  EXPECT_EQ(dry_run.out, estimate.out.substr(0, estimate.out.find("cost")));
  EXPECT_FALSE(std::filesystem::exists(Out()));
  CommandResult jobs = stack_->Sdgctl({"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  // The table's header, and no job.
  EXPECT_EQ(std::count(jobs.out.begin(), jobs.out.end(), '\n'), 1) << jobs.out;

  CommandResult run =
      stack_->Sdgctl(with({"generate", "--output=" + Out(), "--job_id=run"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("tokens: 48 prompt + 60 completion"));
  stats = json::parse(stack_->LlmsimStats());
  EXPECT_EQ(stats["requests"], 3);

  // What the run would refuse, the estimate refuses, naming the field.
  std::vector<std::string> bad = with({"estimate"});
  bad.push_back("--template={{answer}}");
  CommandResult refused = stack_->Sdgctl(bad);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err,
              HasSubstr("INVALID_ARGUMENT: block.prompt_template: column "
                        "\"answer\" is missing from row 0"));
}

// A hosted API that allows 1,200 requests a minute, enforced over 5 s
// windows (at most 100 requests in any burst), as llmsim --rpm does it.
StackOptions RateLimitedApi(std::vector<std::string> sdgd_args) {
  StackOptions options;
  options.llmsim_args = {"--rpm=1200", "--rate_window_s=5"};
  options.sdgd_args = std::move(sdgd_args);
  return options;
}

// 150 one-row shards against it: without a budget sdgd runs into 429s (the
// control below); with --backend_rate_limit it paces them, 20 a second
// after a second's worth, and the API refuses none. Measured by llmsim's
// own windows and arrival times, not by a clock in the test (a slow
// machine only makes the span longer).
TEST_F(EndToEndTest, ARateLimitedBackendIsPacedWithinItsBudget) {
  Start(RateLimitedApi({"--backend_rate_limit=sim=rpm:1200"}));
  std::string in = WriteDataset(150);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--batch_size=1", "--num_workers=32"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json stats = json::parse(stack_->LlmsimStats());
  EXPECT_EQ(stats["requests"], 150);
  EXPECT_FALSE(stats["by_status"].contains("429")) << stats.dump();
  // 20 at once, then 20 a second: the last 130 took 6.5 s at least (less
  // the first request's trip). llmsim's own 5 s windows refused none.
  const std::vector<int64_t> arrivals = stats["arrivals_ms"];
  ASSERT_EQ(arrivals.size(), 150u);
  EXPECT_GE(arrivals.back() - arrivals.front(), 6000);
  auto scrape = HttpGet(stack_->metrics_url());
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_GT(MetricValue(
                *scrape,
                R"(sdg_backend_rate_limit_wait_seconds_total{backend="sim"})"),
            0);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_backend_rate_limited{backend="sim"})"),
            0);
}

// The control: such a job with no budget meets the API's 429s. (300
// requests: unpaced, they meet a 429 unless sdgd sends fewer than 30 a
// second.)
TEST_F(EndToEndTest, WithoutABudgetARateLimitedBackendRefusesRequests) {
  // One attempt a request: the 429s fail their rows at once, not retried;
  // and no x-ratelimit headers, which sdgd would follow.
  StackOptions options = RateLimitedApi({"--backend_max_attempts=1"});
  options.llmsim_args.push_back("--rate_limit_headers=false");
  Start(options);
  std::string in = WriteDataset(300);
  stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(), "--model=m",
                  "--template={{question}}", "--batch_size=1",
                  "--num_workers=32"});
  const json stats = json::parse(stack_->LlmsimStats());
  ASSERT_TRUE(stats["by_status"].contains("429")) << stats.dump();
  EXPECT_GT(stats["by_status"]["429"].get<int64_t>(), 0);
}

// Tokens a minute: 18,000 (300 a second), enforced by llmsim over 4 s
// windows (1,200 tokens at most at once) on each request's prompt and
// completion tokens. sdgd reserves each request's tokens from its body
// before sending and settles them with the reply's usage, holding at most
// a second's worth (300) at once: the API refuses none (sdgd would have to
// be held up 3 s and then send everything at once), and the job's 1,350
// tokens take at least (1,350 - 300) / 300 = 3.5 s. Without the budget a
// job is refused.
TEST_F(EndToEndTest, ATokensBudgetPacesTheJobByTheTokensUsed) {
  for (const bool budget : {true, false}) {
    StackOptions options;
    // (The control's llmsim sends no x-ratelimit headers: sdgd would
    // follow them.)
    options.llmsim_args = {
        "--tpm=18000", "--rate_window_s=4",
        std::string("--rate_limit_headers=") + (budget ? "true" : "false")};
    // The control makes one attempt a request: its 429s are not retried.
    options.sdgd_args = {budget ? "--backend_rate_limit=tpm:18000"
                                : "--backend_max_attempts=1"};
    Start(options);
    // The control has twice the rows (2,700 tokens): unpaced, they meet a
    // 429 unless sdgd takes 5 s to send them (fewer than 60 a second).
    std::string in = WriteDataset(budget ? 150 : 300);
    CommandResult result = stack_->Sdgctl(
        {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
         "--template={{question}}", "--batch_size=1", "--num_workers=32"});
    const json stats = json::parse(stack_->LlmsimStats());
    if (!budget) {
      EXPECT_TRUE(stats["by_status"].contains("429")) << stats.dump();
      continue;
    }
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_FALSE(stats["by_status"].contains("429")) << stats.dump();
    // "What is item N?" and its echo "sim(0): What is item N?".
    EXPECT_EQ(stats["prompt_tokens"].get<int64_t>() +
                  stats["completion_tokens"].get<int64_t>(),
              150 * 9);
    const std::vector<int64_t> arrivals = stats["arrivals_ms"];
    ASSERT_EQ(arrivals.size(), 150u);
    EXPECT_GE(arrivals.back() - arrivals.front(), 3000);  // 3.5 s, less slack
  }
}

TEST_F(EndToEndTest, JobsGetAndCancelCommands) {
  Start();
  std::string in = WriteDataset(2);
  ASSERT_EQ(
      stack_
          ->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                    "--model=m", "--template={{question}}", "--job_id=first"})
          .exit_code,
      0);
  CommandResult jobs = stack_->Sdgctl({"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("first"));
  EXPECT_THAT(jobs.out, HasSubstr("SUCCEEDED"));
  CommandResult get = stack_->Sdgctl({"get", "first"});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(json::parse(get.out)["state"], "JOB_STATE_SUCCEEDED");
  CommandResult missing = stack_->Sdgctl({"cancel", "nope"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND: no job \"nope\""));
}

TEST_F(EndToEndTest, SigtermStopsTheServerWithExitCodeZero) {
  Start();
  stack_->sdgd().Signal(SIGTERM);
  EXPECT_EQ(stack_->sdgd().Wait(), 0);
  EXPECT_THAT(stack_->SdgdLog(), HasSubstr("shutdown: done"));
}

// The API key reaches the backend and nowhere else: not the log (at debug),
// the error file, the events sdgctl prints, or /metrics, even when the
// backend quotes a wrong key back in its 401.
TEST_F(EndToEndTest, ApiKeyIsSentButNeverShown) {
  const std::string key = "sk-e2e-0f1e2d3c4b5a6978";
  const std::string wrong = "sk-e2e-wrong-8877665544";
  std::string key_file = testing::MakeTempDir() + "/sim.key";
  std::string wrong_file = testing::MakeTempDir() + "/wrong.key";
  WriteFile(key_file, key + "\n");
  WriteFile(wrong_file, wrong + "\n");
  StackOptions options;
  options.llmsim_args = {"--api_key=" + key};
  options.llmsim_aliases = {"wrong"};  // the same llmsim, the wrong key
  options.sdgd_args = {"--log_level=debug",
                       "--backend_api_key_file=sim=" + key_file,
                       "--backend_api_key_file=wrong=" + wrong_file};
  Start(options);
  std::string in = WriteDataset(4);
  CommandResult ok =
      stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                      "--model=m", "--template={{question}}"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  auto stats = json::parse(stack_->LlmsimStats());
  EXPECT_EQ(stats["by_status"].value("200", 0), 1);  // one batched request

  CommandResult failed = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--backend=wrong"});
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  std::string errors = ReadFile(Out() + ".errors.jsonl");
  EXPECT_THAT(errors, HasSubstr("[redacted API key]"));
  auto scrape = HttpGet(stack_->metrics_url());
  ASSERT_TRUE(scrape.ok());
  for (const std::string& text :
       {stack_->SdgdLog(), errors, failed.err, failed.out, *scrape}) {
    EXPECT_THAT(text, ::testing::Not(HasSubstr(key)));
    EXPECT_THAT(text, ::testing::Not(HasSubstr(wrong)));
  }
}

// A model server restarted under a running job: the job waits for it
// instead of failing its shards, and succeeds with every row.
TEST_F(EndToEndTest, ABackendOutageLongerThanTheRetryBudgetPausesTheJob) {
  StackOptions options;
  options.llmsim_args = {"--latency_ms=20"};
  Start(options);
  std::string in = WriteDataset(2000);
  auto client = stack_->StartSdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--batch_size=8", "--num_workers=8"},
      stack_->dir() + "/client.stderr");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(Eventually([&] {
    return json::parse(stack_->LlmsimStats())["requests"].get<int>() >= 20;
  }));

  absl::Status restarted = stack_->RestartLlmsim([&] {
    // Down for longer than the retry budget (3 attempts, about 1.5 s of
    // backoff): until sdgd's fourth probe has failed, 3.75 s in.
    EXPECT_TRUE(Eventually(
        [&] {
          return absl::StrContains(stack_->SdgdLog(), "\"probes_failed\":4");
        },
        absl::Seconds(60)))
        << stack_->SdgdLog();
  });
  ASSERT_TRUE(restarted.ok()) << restarted;

  EXPECT_EQ((*client)->Wait(), 0) << ReadFile(stack_->dir() + "/client.stderr");
  EXPECT_THAT(ReadFile(stack_->dir() + "/client.stderr"),
              HasSubstr("JOB_STATE_SUCCEEDED: 2000/2000 rows generated"));
  EXPECT_EQ(JsonLines(ReadFile(Out())).size(), 2000u);
  EXPECT_EQ(ReadFile(Out() + ".errors.jsonl"), "");
  const std::string log = stack_->SdgdLog();
  EXPECT_THAT(log, HasSubstr("\"msg\":\"backend down\""));
  EXPECT_THAT(log, HasSubstr("\"msg\":\"backend up\""));
}

// sdgd's log is what an operator greps and ships: one JSON object per line
// with ts, level and msg, the fields that identify a failure, and no prompt
// text at info level.
TEST_F(EndToEndTest, LogIsJsonLinesWithFieldsAndNoPromptText) {
  StackOptions options;
  options.extra_backends = {"dead=http://127.0.0.1:1/v1"};
  options.sdgd_args = {"--backend_max_attempts=2", "--backend_outage_limit=0"};
  Start(options);
  std::string in = WriteDataset(4);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template=Zanzibar-marker {{question}}", "--backend=dead",
       "--batch_size=2", "--job_id=logged-job"});
  ASSERT_EQ(result.exit_code, 1) << result.err;

  std::string log = stack_->SdgdLog();
  EXPECT_THAT(log, ::testing::Not(HasSubstr("Zanzibar-marker")));
  std::vector<json> lines = JsonLines(log);  // throws on a non-JSON line
  ASSERT_FALSE(lines.empty());
  int shard_failures = 0;
  for (const json& line : lines) {
    EXPECT_TRUE(line.contains("ts") && line.contains("level") &&
                line.contains("msg"))
        << line.dump();
    if (line["msg"] == "shard failed") {
      ++shard_failures;
      EXPECT_EQ(line["job_id"], "logged-job");
      EXPECT_EQ(line["backend"], "dead");
      EXPECT_EQ(line["code"], "UNAVAILABLE");
      EXPECT_EQ(line["attempts"], 2);
      EXPECT_TRUE(line.contains("shard"));
    }
  }
  EXPECT_EQ(shard_failures, 2);
  EXPECT_THAT(log, HasSubstr(R"("msg":"job finished")"));
}

// Every log line names a job by its id as it is, "job rejected" too.
TEST_F(EndToEndTest, ARejectedJobIsLoggedWithItsPlainId) {
  Start();
  std::string in = WriteDataset(2);
  CommandResult result = stack_->Sdgctl(
      {"generate", "--input=" + in, "--output=" + Out(), "--model=m",
       "--template={{question}}", "--backend=nope", "--job_id=rejected-1"});
  ASSERT_EQ(result.exit_code, 2) << result.err;
  int rejected = 0;
  for (const json& line : JsonLines(stack_->SdgdLog())) {
    if (line["msg"] != "job rejected") continue;
    ++rejected;
    EXPECT_EQ(line["job_id"], "rejected-1");
    EXPECT_THAT(line["error"].get<std::string>(),
                HasSubstr("unknown backend \"nope\""));
  }
  EXPECT_EQ(rejected, 1);
}

}  // namespace
}  // namespace sdg::testing
