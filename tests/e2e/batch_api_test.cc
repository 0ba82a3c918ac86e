// The OpenAI Batch API (/v1/files, /v1/batches) end to end: the official
// `openai` npm package (tests/e2e/openai, pinned; installed by
// scripts/test.sh) runs as a user's script would against a real sdgd and
// llmsim, and what it saw is checked here line by line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/sha256.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/free_port.h"
#include "tests/testing/subprocess.h"

namespace sdg::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr absl::Duration kScriptTimeout = absl::Seconds(240);
const std::string kClientDir = SDG_SOURCE_DIR "/tests/e2e/openai";

// `count` chat lines r0, r1... asking "question N" of model m.
std::string ChatLines(int count, const std::string& extra_body = "") {
  std::string text;
  for (int i = 0; i < count; ++i) {
    absl::StrAppend(&text, "{\"custom_id\": \"r", i,
                    "\", \"method\": \"POST\", \"url\": "
                    "\"/v1/chat/completions\", \"body\": {\"model\": \"m\", "
                    "\"messages\": [{\"role\": \"user\", \"content\": "
                    "\"question ",
                    i, "\"}]", extra_body, "}}\n");
  }
  return text;
}

class BatchApiTest : public StackTest {
 protected:
  // sdgd with the Batch API on a port of its own that a restart keeps, and
  // with tenants alice and bob.
  void StartWithBatchApi(std::vector<std::string> llmsim_args = {},
                         std::vector<std::string> sdgd_args = {}) {
    openai_port_ = FreeLoopbackPort();
    const std::string tokens =
        absl::StrCat("alice sha256:", Sha256Hex("alice-token"), "\n",
                     "bob sha256:", Sha256Hex("bob-token"), "\n");
    dir_ = MakeTempDir();
    WriteFile(dir_ + "/tokens", tokens);
    StackOptions options;
    options.llmsim_args = std::move(llmsim_args);
    options.sdgd_args = {
        absl::StrCat("--openai_listen=127.0.0.1:", openai_port_),
        "--auth_tokens_file=" + dir_ + "/tokens"};
    options.sdgd_args.insert(options.sdgd_args.end(), sdgd_args.begin(),
                             sdgd_args.end());
    Start(options);
    ASSERT_TRUE(
        std::ifstream(kClientDir + "/node_modules/openai/package.json").good())
        << "the openai npm package is not installed: run scripts/test.sh, or "
           "`npm ci` in tests/e2e/openai";
  }

  std::vector<std::string> ClientArgv(std::vector<std::string> args) const {
    // node from PATH, as a user runs it.
    std::vector<std::string> argv = {"/usr/bin/env", "node",
                                     kClientDir + "/batch_client.mjs"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // The script, started as `tenant`: OPENAI_BASE_URL and OPENAI_API_KEY as a
  // user sets them.
  std::unique_ptr<Subprocess> StartClient(const std::string& tenant,
                                          std::vector<std::string> args) {
    setenv("OPENAI_BASE_URL",
           absl::StrCat("http://127.0.0.1:", openai_port_, "/v1").c_str(), 1);
    setenv("OPENAI_API_KEY", (tenant + "-token").c_str(), 1);
    auto client = Subprocess::Start(ClientArgv(std::move(args)),
                                    dir_ + "/client." + tenant + ".stderr");
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Runs the script to its `result` line and returns it parsed.
  json RunClient(const std::string& tenant, std::vector<std::string> args) {
    std::unique_ptr<Subprocess> client = StartClient(tenant, std::move(args));
    if (client == nullptr) return json();
    return ResultOf(*client, tenant);
  }

  json ResultOf(Subprocess& client, const std::string& tenant) {
    absl::StatusOr<std::string> line =
        client.ReadLineStartingWith("result ", kScriptTimeout);
    const int exit_code = client.Wait();
    EXPECT_TRUE(line.ok()) << line.status() << "\n"
                           << ReadFile(dir_ + "/client." + tenant + ".stderr");
    EXPECT_EQ(exit_code, 0) << ReadFile(dir_ + "/client." + tenant + ".stderr");
    if (!line.ok()) return json();
    return json::parse(line->substr(std::string("result ").size()));
  }

  std::string InputFile(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    WriteFile(path, text);
    return path;
  }

  int openai_port_ = 0;
  std::string dir_;
};

TEST_F(BatchApiTest, ABatchRunsThroughTheSdkAndItsOutputIsInInputOrder) {
  StartWithBatchApi();
  const std::string text = ChatLines(40);
  json result = RunClient(
      "alice", {"run", InputFile("in.jsonl", text), "/v1/chat/completions"});
  ASSERT_TRUE(result.is_object());
  const json& batch = result["batch"];
  EXPECT_EQ(batch["status"], "completed");
  EXPECT_EQ(batch["object"], "batch");
  EXPECT_EQ(batch["endpoint"], "/v1/chat/completions");
  EXPECT_EQ(batch["completion_window"], "24h");
  EXPECT_EQ(batch["input_file_id"], result["input"]["id"]);
  EXPECT_EQ(batch["request_counts"],
            json({{"total", 40}, {"completed", 40}, {"failed", 0}}));
  EXPECT_EQ(batch["metadata"], json({{"scenario", "run"}}));
  EXPECT_EQ(batch["model"], "m");
  EXPECT_TRUE(batch["error_file_id"].is_null());
  EXPECT_TRUE(batch["errors"].is_null());
  for (const char* stamp : {"created_at", "in_progress_at", "finalizing_at",
                            "completed_at", "expires_at"}) {
    EXPECT_TRUE(batch[stamp].is_number_integer()) << stamp;
  }
  // "question N" is 2 tokens, its echo "sim(0): question N" 3.
  EXPECT_EQ(batch["usage"]["input_tokens"], 80);
  EXPECT_EQ(batch["usage"]["output_tokens"], 120);
  EXPECT_EQ(batch["usage"]["total_tokens"], 200);

  // The input file downloads as it was uploaded, byte for byte.
  EXPECT_EQ(result["input"]["bytes"], text.size());
  EXPECT_EQ(result["input"]["purpose"], "batch");
  EXPECT_EQ(result["input"]["filename"], "in.jsonl");
  EXPECT_TRUE(result["input_content"] == text);
  EXPECT_EQ(result["output_file"]["purpose"], "batch_output");
  EXPECT_EQ(result["output_file"]["bytes"],
            result["output"].get<std::string>().size());

  // Every line once, in input order, with llmsim's reply as its body.
  std::vector<json> lines = JsonLines(result["output"].get<std::string>());
  ASSERT_EQ(lines.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    const json& line = lines[i];
    EXPECT_EQ(line["custom_id"], absl::StrCat("r", i));
    EXPECT_TRUE(line["error"].is_null());
    EXPECT_EQ(line["response"]["status_code"], 200);
    EXPECT_EQ(line["response"]["body"]["object"], "chat.completion");
    EXPECT_EQ(line["response"]["body"]["model"], "m");
    EXPECT_EQ(line["response"]["body"]["choices"][0]["message"]["content"],
              absl::StrCat("sim(0): question ", i));
    EXPECT_THAT(line["id"].get<std::string>(),
                ::testing::StartsWith("batch_req_"));
  }
  // The batch is an sdgd job: sdgctl lists it with its rows.
  CommandResult jobs = stack_->Sdgctl(
      {"jobs", "--token_file=" + InputFile("alice.token", "alice-token\n")});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("openai-batch"));
  EXPECT_THAT(jobs.out, HasSubstr("SUCCEEDED"));
}

TEST_F(BatchApiTest, CompletionsAndEmbeddingsLinesGoToTheirEndpoints) {
  StartWithBatchApi();
  std::string completions;
  std::string embeddings;
  for (int i = 0; i < 3; ++i) {
    absl::StrAppend(&completions, "{\"custom_id\": \"c", i,
                    "\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
                    "\"body\": {\"model\": \"m\", \"prompt\": \"say ",
                    i, "\", \"max_tokens\": 8}}\n");
    // Lines 0 and 2 embed the same text.
    absl::StrAppend(&embeddings, "{\"custom_id\": \"e", i,
                    "\", \"method\": \"POST\", \"url\": \"/v1/embeddings\", "
                    "\"body\": {\"model\": \"m\", \"input\": \"text ",
                    i % 2, "\"}}\n");
  }
  json done = RunClient(
      "alice", {"run", InputFile("c.jsonl", completions), "/v1/completions"});
  ASSERT_TRUE(done.is_object());
  EXPECT_EQ(done["batch"]["status"], "completed");
  std::vector<json> lines = JsonLines(done["output"].get<std::string>());
  ASSERT_EQ(lines.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["response"]["body"]["choices"][0]["text"],
              absl::StrCat("sim(0): say ", i));
  }

  json embedded = RunClient(
      "alice", {"run", InputFile("e.jsonl", embeddings), "/v1/embeddings"});
  ASSERT_TRUE(embedded.is_object());
  EXPECT_EQ(embedded["batch"]["status"], "completed");
  lines = JsonLines(embedded["output"].get<std::string>());
  ASSERT_EQ(lines.size(), 3u);
  const json& first = lines[0]["response"]["body"]["data"][0]["embedding"];
  EXPECT_EQ(first.size(), 8u);
  EXPECT_EQ(lines[2]["response"]["body"]["data"][0]["embedding"], first);
  EXPECT_NE(lines[1]["response"]["body"]["data"][0]["embedding"], first);
  EXPECT_EQ(embedded["batch"]["usage"]["input_tokens"], 6);
}

TEST_F(BatchApiTest, AnInvalidFileFailsValidationNamingEachBadLine) {
  StartWithBatchApi();
  const std::string good =
      "{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": "
      "\"/v1/chat/completions\", \"body\": {\"model\": \"m\", \"messages\": "
      "[{\"role\": \"user\", \"content\": \"hi\"}]}}\n";
  const std::string text =
      good +                                     // line 1
      "{\"custom_id\": \"b\", \"method\": \n" +  // 2: not JSON
      good +                                     // 3: a's custom_id again
      "{\"custom_id\": \"d\", \"method\": \"POST\", \"url\": "
      "\"/v1/completions\", \"body\": {\"model\": \"m\", \"prompt\": "
      "\"x\"}}\n" +  // 4: another url
      "{\"custom_id\": \"e\", \"method\": \"POST\", \"url\": "
      "\"/v1/chat/completions\"}\n" +  // 5: no body
      "{\"custom_id\": \"f\", \"method\": \"POST\", \"url\": "
      "\"/v1/chat/completions\", \"body\": {\"model\": \"other\", "
      "\"messages\": []}}\n";  // 6: a model no backend serves
  json result = RunClient(
      "alice", {"run", InputFile("bad.jsonl", text), "/v1/chat/completions"});
  ASSERT_TRUE(result.is_object());
  const json& batch = result["batch"];
  EXPECT_EQ(batch["status"], "failed");
  EXPECT_TRUE(batch["failed_at"].is_number_integer());
  EXPECT_TRUE(batch["output_file_id"].is_null());
  EXPECT_TRUE(batch["error_file_id"].is_null());
  std::vector<std::pair<int, std::string>> errors;
  for (const json& error : batch["errors"]["data"]) {
    errors.emplace_back(error["line"].get<int>(), error["code"]);
  }
  EXPECT_THAT(errors, ElementsAre(std::pair(2, "invalid_json_line"),
                                  std::pair(3, "duplicate_custom_id"),
                                  std::pair(4, "url_mismatch"),
                                  std::pair(5, "missing_required_parameter"),
                                  std::pair(6, "model_not_found")));
  EXPECT_THAT(batch["errors"]["data"][1]["message"].get<std::string>(),
              HasSubstr("\"a\""));
  EXPECT_EQ(batch["errors"]["data"][3]["param"], "body");
  // Nothing was sent to the model.
  EXPECT_EQ(json::parse(stack_->LlmsimStats())["requests"], 0);
}

TEST_F(BatchApiTest, ALineTheBackendRefusesGoesToTheErrorFile) {
  StartWithBatchApi();
  // Line 1 asks for max_tokens 0, which llmsim (as vLLM) refuses with 400.
  std::vector<std::string> lines = absl::StrSplit(ChatLines(3), '\n');
  lines[1] = absl::StrReplaceAll(lines[1], {{"]}}", "], \"max_tokens\": 0}}"}});
  json result = RunClient(
      "alice", {"run", InputFile("in.jsonl", absl::StrJoin(lines, "\n")),
                "/v1/chat/completions"});
  ASSERT_TRUE(result.is_object());
  const json& batch = result["batch"];
  EXPECT_EQ(batch["status"], "completed");
  EXPECT_EQ(batch["request_counts"],
            json({{"total", 3}, {"completed", 2}, {"failed", 1}}));
  std::vector<json> output = JsonLines(result["output"].get<std::string>());
  std::vector<json> errors = JsonLines(result["errors"].get<std::string>());
  ASSERT_EQ(output.size(), 2u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(output[0]["custom_id"], "r0");
  EXPECT_EQ(output[1]["custom_id"], "r2");
  EXPECT_EQ(errors[0]["custom_id"], "r1");
  EXPECT_EQ(errors[0]["response"]["status_code"], 400);
  EXPECT_THAT(
      errors[0]["response"]["body"]["error"]["message"].get<std::string>(),
      HasSubstr("max_tokens"));
}

TEST_F(BatchApiTest, ACancelledBatchKeepsItsCompletedLines) {
  // llmsim answers the first 57 requests and no other: whatever the order
  // they come in, a shard of 8 completes (8 shards in flight hold at most
  // 56 without one), and the cancel lands with the rest in flight.
  std::vector<std::string> oks(57, "ok");
  StartWithBatchApi(
      {"--fault_script=" + absl::StrJoin(oks, ","), "--hang_rate=1"});
  constexpr int kLines = 400;
  json result =
      RunClient("alice", {"cancel", InputFile("in.jsonl", ChatLines(kLines)),
                          "/v1/chat/completions"});
  ASSERT_TRUE(result.is_object());
  const json& batch = result["batch"];
  EXPECT_EQ(batch["status"], "cancelled");
  EXPECT_TRUE(batch["cancelled_at"].is_number_integer());
  // The cancel's answer: cancelling since it was asked for, until its
  // lines in flight have stopped and its files are written.
  const json& cancelling = result["cancelling"];
  EXPECT_EQ(cancelling["status"], "cancelling");
  ASSERT_TRUE(cancelling["cancelling_at"].is_number_integer())
      << cancelling.dump();
  EXPECT_GE(cancelling["cancelling_at"].get<int64_t>(),
            batch["created_at"].get<int64_t>());
  EXPECT_LE(cancelling["cancelling_at"].get<int64_t>(),
            batch["cancelled_at"].get<int64_t>());
  EXPECT_TRUE(cancelling["cancelled_at"].is_null());
  const int completed = batch["request_counts"]["completed"];
  EXPECT_GE(completed, 8);
  EXPECT_LE(completed, 57);
  std::vector<json> output = JsonLines(result["output"].get<std::string>());
  std::vector<json> errors = JsonLines(result["errors"].get<std::string>());
  // Every line is in one file or the other, once.
  EXPECT_EQ(output.size() + errors.size(), static_cast<size_t>(kLines));
  EXPECT_EQ(output.size(), static_cast<size_t>(completed));
  std::vector<bool> seen(kLines, false);
  for (const auto* file : {&output, &errors}) {
    for (const json& line : *file) {
      const int row = std::stoi(line["custom_id"].get<std::string>().substr(1));
      EXPECT_FALSE(seen[row]) << "line " << row << " twice";
      seen[row] = true;
    }
  }
  for (const json& line : output) {
    EXPECT_EQ(line["response"]["status_code"], 200);
  }
  EXPECT_EQ(errors.back()["error"]["code"], "batch_cancelled");
  EXPECT_TRUE(errors.back()["response"].is_null());
}

TEST_F(BatchApiTest, ABatchPastItsWindowExpiresKeepingItsCompletedLines) {
  // A window of 3 s (a batch's "24h" on this server); llmsim answers the
  // first 57 requests and then none, so the batch cannot end before it.
  std::vector<std::string> oks(57, "ok");
  StartWithBatchApi(
      {"--fault_script=" + absl::StrJoin(oks, ","), "--hang_rate=1"},
      {"--openai_completion_window=3s"});
  constexpr int kLines = 200;
  json result =
      RunClient("alice", {"run", InputFile("in.jsonl", ChatLines(kLines)),
                          "/v1/chat/completions"});
  ASSERT_TRUE(result.is_object());
  const json& batch = result["batch"];
  EXPECT_EQ(batch["status"], "expired");
  EXPECT_TRUE(batch["expired_at"].is_number_integer());
  EXPECT_EQ(batch["expires_at"].get<int64_t>(),
            batch["created_at"].get<int64_t>() + 3);
  const int completed = batch["request_counts"]["completed"];
  EXPECT_GE(completed, 8);
  EXPECT_LE(completed, 57);
  std::vector<json> output = JsonLines(result["output"].get<std::string>());
  std::vector<json> errors = JsonLines(result["errors"].get<std::string>());
  EXPECT_EQ(output.size(), static_cast<size_t>(completed));
  EXPECT_EQ(output.size() + errors.size(), static_cast<size_t>(kLines));
  EXPECT_EQ(errors.back()["error"]["code"], "batch_expired");
  EXPECT_THAT(errors.back()["error"]["message"].get<std::string>(),
              HasSubstr("timeout of 3s"));
}

TEST_F(BatchApiTest, ListingPagesThroughEveryBatchNewestFirst) {
  StartWithBatchApi();
  json result = RunClient("alice", {"list", InputFile("in.jsonl", ChatLines(2)),
                                    "/v1/chat/completions", "3"});
  ASSERT_TRUE(result.is_object());
  std::vector<std::string> made = result["made"];
  std::vector<std::string> listed = result["listed"];
  EXPECT_THAT(listed, ElementsAre(made[2], made[1], made[0]));
  EXPECT_THAT(result["first_page"].get<std::vector<std::string>>(),
              ElementsAre(made[2], made[1]));
  EXPECT_EQ(result["has_more"], true);
  EXPECT_EQ(result["files"].size(), 3u);
  // Bob sees none of alice's.
  json bobs = RunClient("bob", {"list", InputFile("in.jsonl", ChatLines(2)),
                                "/v1/chat/completions", "1"});
  ASSERT_TRUE(bobs.is_object());
  EXPECT_EQ(bobs["listed"].size(), 1u);
  EXPECT_EQ(bobs["files"].size(), 1u);
}

TEST_F(BatchApiTest, MistakesRaiseTheSdksTypedErrors) {
  StartWithBatchApi();
  const std::string file = InputFile("in.jsonl", ChatLines(1));
  json alices = RunClient("alice", {"run", file, "/v1/chat/completions"});
  ASSERT_TRUE(alices.is_object());
  const std::string alices_batch = alices["batch"]["id"];
  json result = RunClient("bob", {"errors", file, alices_batch});
  ASSERT_TRUE(result.is_object());
  auto error = [&](const char* name) {
    return std::pair(result[name]["error"].get<std::string>(),
                     result[name]["status"].get<int>());
  };
  EXPECT_EQ(error("wrong_token"),
            std::pair(std::string("AuthenticationError"), 401));
  // Another tenant's batch is as unknown as none.
  EXPECT_EQ(error("other_tenants_batch"),
            std::pair(std::string("NotFoundError"), 404));
  EXPECT_EQ(error("unknown_file"),
            std::pair(std::string("NotFoundError"), 404));
  EXPECT_EQ(error("unknown_input"),
            std::pair(std::string("BadRequestError"), 400));
  EXPECT_EQ(error("bad_endpoint"),
            std::pair(std::string("BadRequestError"), 400));
  EXPECT_THAT(result["bad_endpoint"]["message"].get<std::string>(),
              HasSubstr("/v1/images"));
  EXPECT_EQ(error("bad_purpose"),
            std::pair(std::string("BadRequestError"), 400));
  EXPECT_EQ(error("deleted"), std::pair(std::string("NotFoundError"), 404));
}

// docs/BATCH_API.md's curl example, run as a reader would paste it.
TEST_F(BatchApiTest, TheDocsCurlExampleRunsAsWritten) {
  StartWithBatchApi();
  const std::string doc = ReadFile(SDG_SOURCE_DIR "/docs/BATCH_API.md");
  const size_t section = doc.find("## Try it with curl");
  ASSERT_NE(section, std::string::npos);
  const size_t begin = doc.find("```sh\n", section);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```\n", begin + 6);
  ASSERT_NE(end, std::string::npos);
  const std::string script = doc.substr(begin + 6, end - begin - 6);
  CommandResult run = RunCommand(
      {"/usr/bin/env", "-C", dir_,
       absl::StrCat("SDGD=http://127.0.0.1:", openai_port_),
       "TOKEN=alice-token", "bash", "-euo", "pipefail", "-c", script});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<json> lines = JsonLines(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_EQ(lines[0]["custom_id"], "q1");
  EXPECT_EQ(lines[0]["response"]["body"]["choices"][0]["message"]["content"],
            "sim(0): Say hi");
  EXPECT_EQ(lines[1]["custom_id"], "q2");
}

TEST_F(BatchApiTest, KillNineMidBatchAndTheBatchCompletesWithEachLineOnce) {
  // llmsim answers the first 200 requests and then none, so sdgd is killed
  // mid-batch however fast it runs; the llmsim started after it answers all.
  std::vector<std::string> oks(200, "ok");
  StartWithBatchApi(
      {"--fault_script=" + absl::StrJoin(oks, ","), "--hang_rate=1"});
  constexpr int kLines = 600;
  std::unique_ptr<Subprocess> client =
      StartClient("alice", {"run", InputFile("in.jsonl", ChatLines(kLines)),
                            "/v1/chat/completions"});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->ReadLineStartingWith("created ", kScriptTimeout).ok())
      << ReadFile(dir_ + "/client.alice.stderr");
  ASSERT_TRUE(Eventually([&] {
    return json::parse(stack_->LlmsimStats())["prompts"].get<int64_t>() == 200;
  }));
  // The SDK keeps polling through the restart, its retries carrying it.
  absl::StatusOr<int> killed = stack_->RestartSdgd(SIGKILL, [&] {
    absl::Status restarted = stack_->RestartLlmsim(nullptr, {{}});
    EXPECT_TRUE(restarted.ok()) << restarted;
  });
  ASSERT_TRUE(killed.ok()) << killed.status();
  json result = ResultOf(*client, "alice");
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["batch"]["status"], "completed");
  EXPECT_EQ(result["batch"]["request_counts"],
            json({{"total", kLines}, {"completed", kLines}, {"failed", 0}}));
  std::vector<json> output = JsonLines(result["output"].get<std::string>());
  ASSERT_EQ(output.size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) {
    EXPECT_EQ(output[i]["custom_id"], absl::StrCat("r", i));
  }
  EXPECT_THAT(stack_->SdgdLog(), HasSubstr("\"msg\":\"job resuming\""));
  // The new llmsim answered the lines not committed before the kill, and
  // at least those no shard had finished: requests are at least once (a
  // shard's answered lines run again unless it was committed).
  const int64_t after = json::parse(stack_->LlmsimStats())["prompts"];
  EXPECT_GE(after, kLines - 200);
  EXPECT_LE(after, kLines);
}

}  // namespace
}  // namespace sdg::testing
