#include "server/scheduling/job_estimator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/testing/test_pipelines.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;

// A tokenizer that counts words, and what it was asked.
class WordCounter final : public PromptCounter {
 public:
  explicit WordCounter(ServerShape shape) : shape_(shape) {}

  absl::StatusOr<ServerShape> Shape(const v1::Block&) override {
    return shape_;
  }
  absl::StatusOr<std::vector<int64_t>> CountTokens(
      const v1::Block&, const std::vector<std::string>& prompts) override {
    std::vector<int64_t> counts;
    for (const std::string& prompt : prompts) {
      asked.push_back(prompt);
      counts.push_back(static_cast<int64_t>(
          std::vector<std::string>(absl::StrSplit(prompt, ' ')).size()));
    }
    return counts;
  }

  std::vector<std::string> asked;

 private:
  ServerShape shape_;
};

PromptCounter::ServerShape Server(bool tokenizer, bool batching = false,
                                  bool one_choice = false,
                                  ThroughputMeter::Pace pace = {}) {
  PromptCounter::ServerShape shape;
  shape.tokenizer = tokenizer;
  shape.batching = batching;
  shape.one_choice_per_request = one_choice;
  shape.pace = pace;
  return shape;
}

google::protobuf::Struct Row(const std::string& column,
                             const std::string& value) {
  google::protobuf::Struct row;
  (*row.mutable_fields())[column].set_string_value(value);
  return row;
}

JobSpec BlockSpec(const std::string& prompt_template, int n, int max_tokens) {
  v1::GenerateJobRequest request;
  request.mutable_block()->set_model("m");
  request.mutable_block()->set_prompt_template(prompt_template);
  request.mutable_block()->set_n(n);
  request.mutable_block()->set_max_tokens(max_tokens);
  request.set_batch_size(2);
  absl::StatusOr<JobSpec> spec = ValidateRequest(request, {"sim"}, {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Past the first prompts the tokenizer counts, it counts every 2nd for as
// many, then every 4th..., and the rest are scaled by the tokens per byte
// of that sample, each sampled prompt standing for its stride's prompts.
TEST(JobEstimatorTest, PromptsPastTheTokenizedOnesAreSampledAcrossTheDataset) {
  JobSpec spec = BlockSpec("{{q}}", 1, 0);
  WordCounter counter(Server(/*tokenizer=*/true));
  JobEstimator estimator(spec, counter, /*tokenized_prompts=*/2);
  ASSERT_TRUE(estimator.AddShard({Row("q", "ab c"), Row("q", "d ef")}).ok());
  ASSERT_TRUE(
      estimator.AddShard({Row("q", "g h i j"), Row("q", "klmnopq")}).ok());
  ASSERT_TRUE(
      estimator.AddShard({Row("q", "r s t u"), Row("q", "vwxyz12")}).ok());
  ASSERT_TRUE(estimator.AddShard({Row("q", "3 4 5 6")}).ok());
  v1::JobEstimate estimate = estimator.Finish();
  // Prompts 0 and 1, then 2 and 4 (stride 2), then none of 5 and 6 (4).
  EXPECT_THAT(counter.asked, ElementsAre("ab c", "d ef", "g h i j", "r s t u"));
  const v1::StepEstimate& step = estimate.steps(0);
  EXPECT_EQ(step.prompt_tokens_counting(), v1::TOKEN_COUNTING_SAMPLED);
  EXPECT_EQ(step.tokenized_prompts(), 4);
  // Weighted, the sample is 2 + 2 + 4*2 + 4*2 = 20 tokens in 4 + 4 + 7*2 +
  // 7*2 = 36 bytes; the 7 + 7 + 7 bytes not sampled are 11.67 tokens.
  EXPECT_EQ(step.prompt_tokens(), 2 + 2 + 4 + 4 + 12);
  EXPECT_EQ(step.requests(), 7);
  EXPECT_FALSE(step.completion_tokens_bounded());
  EXPECT_TRUE(estimate.complete());
  EXPECT_FALSE(estimate.completion_tokens_bounded());
}

// One choice per request: each sample is a request that carries its prompt.
TEST(JobEstimatorTest, EachSampleOfAOneChoiceServerIsARequestWithItsPrompt) {
  JobSpec spec = BlockSpec("say {{q}}", 3, 5);
  WordCounter counter(
      Server(/*tokenizer=*/true, /*batching=*/false, /*one_choice=*/true));
  JobEstimator estimator(spec, counter);
  ASSERT_TRUE(estimator.AddShard({Row("q", "a"), Row("q", "b c")}).ok());
  v1::JobEstimate estimate = estimator.Finish();
  EXPECT_EQ(estimate.requests(), 2 * 3);
  EXPECT_EQ(estimate.prompt_tokens(), (2 + 3) * 3);
  EXPECT_EQ(estimate.max_completion_tokens(), 5 * 3 * 2);
  EXPECT_TRUE(estimate.completion_tokens_bounded());
}

// A batching server takes a shard's completions prompts as one request; a
// shard of one prompt is one request too.
TEST(JobEstimatorTest, ABatchingServerTakesAShardsPromptsAsOneRequest) {
  JobSpec spec = BlockSpec("{{q}}", 2, 1);
  WordCounter counter(Server(/*tokenizer=*/false, /*batching=*/true));
  JobEstimator estimator(spec, counter);
  ASSERT_TRUE(
      estimator.AddShard({Row("q", "1234"), Row("q", "12345678")}).ok());
  ASSERT_TRUE(estimator.AddShard({Row("q", "1")}).ok());
  v1::JobEstimate estimate = estimator.Finish();
  EXPECT_EQ(estimate.rows(), 3);
  EXPECT_EQ(estimate.requests(), 2);
  // No tokenizer: 13 bytes at 4 a token.
  EXPECT_EQ(estimate.steps(0).prompt_tokens_counting(),
            v1::TOKEN_COUNTING_BYTES);
  EXPECT_EQ(estimate.prompt_tokens(), 4);
  EXPECT_TRUE(counter.asked.empty());
}

// A pipeline: the steps before its first LLM step run on the seed rows (a
// flatten doubles them); the LLM steps after it prompt with generated text
// and are not counted.
constexpr char kFlattenThenTwoLlmSteps[] = R"({"pipeline": {"steps": [
    {"name": "flat", "flatten_columns": {
      "var_columns": ["a", "b"], "value_name": "v", "var_name": "which"}},
    {"name": "gen", "llm": {"block": {"model": "m", "n": 2, "max_tokens": 3,
      "prompt_template": "  about {{v}}  "}, "output_columns": ["q"]}},
    {"name": "judge", "llm": {"block": {"model": "m", "max_tokens": 9,
      "prompt_template": "judge {{q}}"}, "output_columns": ["verdict"]}}]}})";

TEST(JobEstimatorTest, APipelinesFirstLlmStepIsCountedFromItsSeedRows) {
  JobSpec spec = testing::PipelineJobSpec(kFlattenThenTwoLlmSteps, "p", 8);
  WordCounter counter(Server(/*tokenizer=*/true));
  JobEstimator estimator(spec, counter);
  google::protobuf::Struct seed = Row("a", "x y");
  (*seed.mutable_fields())["b"].set_string_value("z");
  ASSERT_TRUE(estimator.AddShard({seed}).ok());
  v1::JobEstimate estimate = estimator.Finish();
  // Stripped, as LLMBlock strips its prompts.
  EXPECT_THAT(counter.asked, ElementsAre("about x y", "about z"));
  ASSERT_EQ(estimate.steps_size(), 2);
  const v1::StepEstimate& gen = estimate.steps(0);
  EXPECT_EQ(gen.step_index(), 1);
  EXPECT_EQ(gen.step_name(), "gen");
  EXPECT_EQ(gen.rows(), 2);
  EXPECT_TRUE(gen.rows_exact());
  EXPECT_EQ(gen.samples_per_row(), 2);
  EXPECT_EQ(gen.requests(), 2);
  EXPECT_EQ(gen.prompt_tokens(), 3 + 2);
  EXPECT_EQ(gen.max_completion_tokens(), 3 * 2 * 2);
  const v1::StepEstimate& judge = estimate.steps(1);
  EXPECT_EQ(judge.step_name(), "judge");
  EXPECT_EQ(judge.prompt_tokens_counting(), v1::TOKEN_COUNTING_UNKNOWN);
  EXPECT_FALSE(judge.rows_exact());
  EXPECT_EQ(judge.requests(), 0);
  EXPECT_FALSE(estimate.complete());
  // The sums are the first step's, whose completions are bounded.
  EXPECT_EQ(estimate.prompt_tokens(), 5);
  EXPECT_TRUE(estimate.completion_tokens_bounded());
}

// The time range: 4 requests at the 2 a second measured, or 40 tokens at
// most at the 5 a second measured: 2 s to 8 s.
TEST(JobEstimatorTest, TheTimeRangeFollowsTheBackendsMeasuredPace) {
  JobSpec spec = BlockSpec("{{q}}", 1, 10);
  WordCounter counter(Server(
      /*tokenizer=*/true, false, false,
      {.requests = 20, .completion_tokens = 50, .busy = absl::Seconds(10)}));
  JobEstimator estimator(spec, counter);
  ASSERT_TRUE(estimator.AddShard({Row("q", "a"), Row("q", "b")}).ok());
  ASSERT_TRUE(estimator.AddShard({Row("q", "c"), Row("q", "d")}).ok());
  v1::JobEstimate estimate = estimator.Finish();
  EXPECT_EQ(estimate.measured_requests(), 20);
  EXPECT_EQ(estimate.min_duration().seconds(), 2);
  EXPECT_EQ(estimate.max_duration().seconds(), 8);
}

TEST(JobEstimatorTest, NoTimeRangeBeforeTheBackendHasBeenMeasured) {
  JobSpec spec = BlockSpec("{{q}}", 1, 10);
  WordCounter counter(Server(
      /*tokenizer=*/true, false, false,
      {.requests = 9, .completion_tokens = 50, .busy = absl::Seconds(10)}));
  JobEstimator estimator(spec, counter);
  ASSERT_TRUE(estimator.AddShard({Row("q", "a")}).ok());
  v1::JobEstimate estimate = estimator.Finish();
  EXPECT_EQ(estimate.measured_requests(), 9);
  EXPECT_FALSE(estimate.has_min_duration());
  EXPECT_FALSE(estimate.has_max_duration());
}

}  // namespace
}  // namespace sdg
