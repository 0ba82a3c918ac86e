#include "server/backend/sample_fanout.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/backend/openai_protocol.h"

namespace sdg {
namespace {

using nlohmann::json;

BackendReply Ok(json body, int attempts = 1) {
  return BackendReply{absl::OkStatus(), body.dump(), attempts};
}

json ChatChoice(int index, const std::string& text) {
  return {{"index", index},
          {"message", {{"role", "assistant"}, {"content", text}}},
          {"finish_reason", "stop"}};
}

TEST(SplitSamplesTest, EachSampleAsksForOneChoiceWithItsOwnSeed) {
  absl::StatusOr<std::vector<std::string>> bodies = SplitSamples(
      R"({"model":"m","prompt":"Q","n":3,"seed":40,"max_tokens":5})", 3);
  ASSERT_TRUE(bodies.ok()) << bodies.status();
  ASSERT_EQ(bodies->size(), 3u);
  for (int s = 0; s < 3; ++s) {
    json body = json::parse((*bodies)[s]);
    EXPECT_EQ(body["n"], 1);
    EXPECT_EQ(body["seed"], 40 + s);
    EXPECT_EQ(body["prompt"], "Q");
    EXPECT_EQ(body["max_tokens"], 5);
  }
}

TEST(SplitSamplesTest, WithoutASeedNoneIsAdded) {
  absl::StatusOr<std::vector<std::string>> bodies =
      SplitSamples(R"({"model":"m","messages":[],"n":2})", 2);
  ASSERT_TRUE(bodies.ok());
  for (const std::string& body : *bodies) {
    EXPECT_FALSE(json::parse(body).contains("seed"));
    EXPECT_EQ(json::parse(body)["n"], 1);
  }
}

TEST(SplitSamplesTest, ABodyThatIsNotAnObjectIsRefused) {
  EXPECT_EQ(SplitSamples("[1]", 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MergeSamplesTest, ChoicesComeInSampleOrderWithUsageSummed) {
  std::vector<BackendReply> replies;
  for (int s = 0; s < 3; ++s) {
    replies.push_back(
        Ok({{"choices", {ChatChoice(0, "s" + std::to_string(s))}},
            {"usage", {{"prompt_tokens", 4}, {"completion_tokens", s + 1}}}},
           s == 1 ? 3 : 1));
  }
  BackendReply merged = MergeSamples(std::move(replies));
  ASSERT_TRUE(merged.status.ok()) << merged.status;
  EXPECT_EQ(merged.attempts, 3);  // the most any sample took
  absl::StatusOr<Completion> completion = ParseChatReply(merged.body, 3);
  ASSERT_TRUE(completion.ok()) << completion.status();
  ASSERT_EQ(completion->choices.size(), 3u);
  EXPECT_EQ(completion->choices[0].text, "s0");
  EXPECT_EQ(completion->choices[1].text, "s1");
  EXPECT_EQ(completion->choices[2].text, "s2");
  EXPECT_EQ(completion->prompt_tokens, 12);
  EXPECT_EQ(completion->completion_tokens, 6);
}

TEST(MergeSamplesTest, PromptListsKeepVllmsPromptMajorOrder) {
  // Two prompts, two samples: reply s holds one choice per prompt.
  std::vector<BackendReply> replies;
  for (int s = 0; s < 2; ++s) {
    json choices = json::array();
    for (int p = 0; p < 2; ++p) {
      choices.push_back(
          {{"index", p},
           {"text", "p" + std::to_string(p) + "s" + std::to_string(s)},
           {"finish_reason", "stop"}});
    }
    replies.push_back(Ok({{"choices", choices}}));
  }
  absl::StatusOr<Completion> completion =
      ParseCompletionsReply(MergeSamples(std::move(replies)).body, 4);
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->choices[0].text, "p0s0");
  EXPECT_EQ(completion->choices[1].text, "p0s1");
  EXPECT_EQ(completion->choices[2].text, "p1s0");
  EXPECT_EQ(completion->choices[3].text, "p1s1");
}

TEST(MergeSamplesTest, AFailedSampleFailsTheWholeReplyNamingIt) {
  std::vector<BackendReply> replies;
  replies.push_back(Ok({{"choices", {ChatChoice(0, "a")}}}));
  replies.push_back(BackendReply{
      absl::UnavailableError("backend returned HTTP 503: busy"), "", 3});
  replies.push_back(BackendReply{absl::InternalError("later"), "", 1});
  BackendReply merged = MergeSamples(std::move(replies));
  EXPECT_EQ(merged.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(merged.status.message(),
            "sample 2 of 3: backend returned HTTP 503: busy");
  EXPECT_EQ(merged.attempts, 3);
  EXPECT_EQ(merged.body, "");
}

TEST(MergeSamplesTest, AReplyWithoutChoicesIsDataLoss) {
  std::vector<BackendReply> replies;
  replies.push_back(Ok({{"choices", {ChatChoice(0, "a")}}}));
  replies.push_back(BackendReply{absl::OkStatus(), "not json", 1});
  BackendReply merged = MergeSamples(std::move(replies));
  EXPECT_EQ(merged.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(merged.status.message(),
            "sample 2 of 2: backend reply was not valid JSON with choices");
}

TEST(ChoiceCountRefusalTest, LlamaCppsWordsAreRecognised) {
  EXPECT_TRUE(IsChoiceCountRefusal(
      500,
      R"({"error":{"code":500,"message":"Only one completion choice is allowed","type":"server_error"}})"));
  EXPECT_FALSE(IsChoiceCountRefusal(500, R"({"error":{"message":"oops"}})"));
  EXPECT_FALSE(IsChoiceCountRefusal(
      200, "Only one completion choice is allowed"));  // a reply's text
}

}  // namespace
}  // namespace sdg
