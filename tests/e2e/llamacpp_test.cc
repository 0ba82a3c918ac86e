// End to end against llmsim as llama.cpp's llama-server, the seeds' own
// backend (`ilab serve`, a laptop model): sdgctl asks for several samples
// per row without naming a model, and sdgd may start before the server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;

constexpr char kModelPath[] = "/models/granite-7b-lab-Q4_K_M.gguf";

class LlamaCppEndToEndTest : public StackTest {
 protected:
  static StackOptions LlamaServer(int slots) {
    StackOptions options;
    options.llmsim_args = {
        "--mode=llamacpp", std::string("--model=") + kModelPath,
        "--slots=" + std::to_string(slots), "--latency_ms=5"};
    return options;
  }

  std::string WriteDataset(int rows) {
    std::string path = stack_->dir() + "/in.jsonl";
    std::string text;
    for (int i = 0; i < rows; ++i) {
      text += json{{"question", "q" + std::to_string(i)}}.dump() + "\n";
    }
    WriteFile(path, text);
    return path;
  }

  std::string Out() const { return stack_->dir() + "/out.jsonl"; }

  // sdgctl generate's lines: each row's three samples in order, the s-th
  // from seed 7 + s.
  void ExpectThreeSeededSamples(int rows) {
    std::vector<json> lines = JsonLines(ReadFile(Out()));
    ASSERT_EQ(lines.size(), static_cast<size_t>(rows * 3));
    for (int r = 0; r < rows; ++r) {
      for (int s = 0; s < 3; ++s) {
        EXPECT_EQ(
            lines[r * 3 + s]["output"],
            "sim(seed " + std::to_string(7 + s) + "): q" + std::to_string(r));
      }
    }
  }
};

TEST_F(LlamaCppEndToEndTest, ThreeSamplesWithNoModelNamedCompletionsAndChat) {
  Start(LlamaServer(2));
  std::string in = WriteDataset(8);
  for (const char* api : {"completions", "chat"}) {
    CommandResult result =
        stack_->Sdgctl({"generate", "--input=" + in, "--output=" + Out(),
                        "--template={{question}}", "--n=3", "--seed=7",
                        std::string("--api=") + api});
    ASSERT_EQ(result.exit_code, 0) << api << ": " << result.err;
    ExpectThreeSeededSamples(8);
  }
  json stats = json::parse(stack_->LlmsimStats());
  // llama.cpp refuses n != 1: every request asked for one choice.
  EXPECT_EQ(stats["requests"], 2 * 8 * 3);
  EXPECT_EQ(stats["by_status"].value("500", 0), 0) << stats.dump();
  EXPECT_EQ(stats["max_in_flight"], 2);
  EXPECT_LE(stats["max_connections_open"], 2);
  EXPECT_THAT(stack_->SdgdLog(),
              ::testing::HasSubstr(R"("one_choice_per_request":true)"));
}

// sdgd up before the model server, as when both start together on
// Kubernetes: from the first request on, the server never has more requests
// in flight, nor more connections open, than its slots.
TEST_F(LlamaCppEndToEndTest, SdgdStartedBeforeTheServerNeverFloodsIt) {
  StackOptions options = LlamaServer(2);
  options.llmsim_starts_late = true;
  Start(options);
  // sdgd has asked, found nothing there, and holds its calls.
  ASSERT_TRUE(Eventually([&] {
    return absl::StrContains(stack_->SdgdLog(), R"("msg":"backend down")");
  })) << stack_->SdgdLog();
  std::string in = WriteDataset(40);
  auto sdgctl =
      stack_->StartSdgctl({"generate", "--input=" + in, "--output=" + Out(),
                           "--template={{question}}", "--model=m",
                           "--batch_size=4", "--num_workers=10"},
                          stack_->dir() + "/sdgctl.err");
  ASSERT_TRUE(sdgctl.ok()) << sdgctl.status();
  // The job is admitted and waiting before the server comes up.
  ASSERT_TRUE(Eventually([&] {
    CommandResult jobs = stack_->Sdgctl({"jobs"});
    return absl::StrContains(jobs.out, "RUNNING");
  }));
  ASSERT_TRUE(stack_->StartLlmsimLate().ok());

  EXPECT_EQ((*sdgctl)->Wait(), 0) << ReadFile(stack_->dir() + "/sdgctl.err");
  EXPECT_EQ(JsonLines(ReadFile(Out())).size(), 40u);
  json stats = json::parse(stack_->LlmsimStats());
  EXPECT_EQ(stats["requests"], 40);
  EXPECT_EQ(stats["max_in_flight"], 2) << stats.dump();
  EXPECT_LE(stats["max_connections_open"], 2) << stats.dump();
  EXPECT_EQ(stats["max_waiting_for_thread"], 0) << stats.dump();
}

}  // namespace
}  // namespace sdg::testing
