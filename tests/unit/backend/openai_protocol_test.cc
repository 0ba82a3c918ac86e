#include "server/backend/openai_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sdg {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

v1::Block TestBlock() {
  v1::Block block;
  block.set_model("m");
  return block;
}

TEST(OpenAiProtocolTest, CompletionsBodyForOnePromptHasAStringPrompt) {
  v1::Block block = TestBlock();
  block.set_max_tokens(32);
  json body = json::parse(BuildCompletionsBody(block, {"hello"}));
  EXPECT_EQ(body["prompt"], "hello");
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["n"], 1);
  EXPECT_EQ(body["max_tokens"], 32);
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_FALSE(body.contains("seed"));
}

TEST(OpenAiProtocolTest, CompletionsBodyForSeveralPromptsHasAList) {
  v1::Block block = TestBlock();
  block.set_n(2);
  block.set_temperature(0.0);
  block.set_seed(7);
  block.add_stop("\n\n");
  json body = json::parse(BuildCompletionsBody(block, {"a", "b"}));
  EXPECT_EQ(body["prompt"], json::array({"a", "b"}));
  EXPECT_EQ(body["n"], 2);
  EXPECT_EQ(body["temperature"], 0.0);  // set to zero is still sent
  EXPECT_EQ(body["seed"], 7);
  EXPECT_EQ(body["stop"], json::array({"\n\n"}));
  EXPECT_FALSE(body.contains("max_tokens"));
}

TEST(OpenAiProtocolTest, ChatBodyPutsTheSystemPromptFirst) {
  v1::Block block = TestBlock();
  block.set_system_prompt("Be brief.");
  json body = json::parse(BuildChatBody(block, "Hi"));
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][0]["content"], "Be brief.");
  EXPECT_EQ(body["messages"][1]["role"], "user");
  EXPECT_EQ(body["messages"][1]["content"], "Hi");
}

TEST(OpenAiProtocolTest, ChatBodyWithoutSystemPromptHasOnlyTheUser) {
  json body = json::parse(BuildChatBody(TestBlock(), "Hi"));
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
}

// The bodies read back as the JSON a DOM would have made, for prompts with
// every kind of character JSON escapes, non-ASCII text, and every field.
TEST(OpenAiProtocolTest, BodiesReadBackAsTheirFieldsWithEveryCharacter) {
  std::string awkward = "quote \" backslash \\ slash / newline \n tab \t ";
  for (int c = 0; c < 0x20; ++c) awkward.push_back(static_cast<char>(c));
  awkward += " \x7f héllo 世界 🙂 \\u0041";
  v1::Block block = TestBlock();
  block.set_system_prompt("Be \"brief\"\n");
  block.set_max_tokens(64);
  block.set_temperature(0.7);
  block.set_top_p(0.95);
  block.set_seed(-42);
  block.add_stop("\n\n");
  block.add_stop("END\"");
  block.set_n(3);

  json chat = json::parse(BuildChatBody(block, awkward));
  EXPECT_EQ(chat, (json{
                      {"messages",
                       {{{"role", "system"}, {"content", "Be \"brief\"\n"}},
                        {{"role", "user"}, {"content", awkward}}}},
                      {"model", block.model()},
                      {"n", 3},
                      {"max_tokens", 64},
                      {"temperature", 0.7},
                      {"top_p", 0.95},
                      {"seed", -42},
                      {"stop", {"\n\n", "END\""}},
                  }));
  json batched = json::parse(BuildCompletionsBody(block, {awkward, "", "b"}));
  EXPECT_EQ(batched["prompt"], (json{awkward, "", "b"}));
  EXPECT_EQ(batched["temperature"].get<double>(), 0.7);
  json single = json::parse(BuildCompletionsBody(TestBlock(), {awkward}));
  EXPECT_EQ(single["prompt"], awkward);
  EXPECT_FALSE(single.contains("temperature"));
  EXPECT_FALSE(single.contains("stop"));
}

// Never from a request (protobuf strings are UTF-8), but a body stays JSON:
// bytes that are not UTF-8 become U+FFFD. The fuzzer found the case: a
// four-byte character cut after its first byte.
TEST(OpenAiProtocolTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  v1::Block block = TestBlock();
  block.set_system_prompt("\"h\xf0");
  for (const std::string& prompt :
       {std::string("a\xf0\x9d\xb2"), std::string("\xc0\xaf"),
        std::string("\xed\xa0\x80"), std::string("\xff")}) {
    json chat = json::parse(BuildChatBody(block, prompt), nullptr, false);
    ASSERT_FALSE(chat.is_discarded()) << prompt;
    EXPECT_EQ(chat["messages"][0]["content"], "\"h\xef\xbf\xbd");
    EXPECT_THAT(chat["messages"][1]["content"].get<std::string>(),
                HasSubstr("\xef\xbf\xbd"));
  }
  EXPECT_EQ(json::parse(BuildChatBody(
                block, "\xf0\x9d\xb2\x8c"))["messages"][1]["content"],
            "\xf0\x9d\xb2\x8c");
}

TEST(OpenAiProtocolTest, CompletionsReplyChoicesAreOrderedByIndex) {
  auto reply = ParseCompletionsReply(
      R"({"choices":[{"index":2,"text":"c","finish_reason":"length"},
                     {"index":0,"text":"a","finish_reason":"stop"},
                     {"index":1,"text":"b"}],
          "usage":{"prompt_tokens":5,"completion_tokens":9}})",
      3);
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->choices.size(), 3u);
  EXPECT_EQ(reply->choices[0].text, "a");
  EXPECT_EQ(reply->choices[1].text, "b");
  EXPECT_EQ(reply->choices[2].text, "c");
  EXPECT_EQ(reply->choices[2].finish_reason, "length");
  EXPECT_EQ(reply->prompt_tokens, 5);
  EXPECT_EQ(reply->completion_tokens, 9);
}

TEST(OpenAiProtocolTest, ChatReplyReadsMessageContent) {
  auto reply = ParseChatReply(
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},
                      "finish_reason":"stop"}]})",
      1);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->choices[0].text, "hi");
  EXPECT_EQ(reply->prompt_tokens, 0);  // usage is optional
}

TEST(OpenAiProtocolTest, UsageThatIsNotAnIntegerCountsAsItsNumberOrZero) {
  auto reply = ParseChatReply(
      R"({"choices":[{"index":0,"message":{"content":"hi"}}],
          "usage":{"prompt_tokens":"5","completion_tokens":9.0}})",
      1);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->prompt_tokens, 0);
  EXPECT_EQ(reply->completion_tokens, 9);
}

TEST(OpenAiProtocolTest, ARepliesTextIsWholeAfterAMuchLongerReply) {
  // A worker's parser keeps its buffers between replies, and drops them
  // after one over a megabyte.
  const std::string long_text(3 << 20, 'x');
  auto long_reply = ParseCompletionsReply(
      R"({"choices":[{"index":0,"text":")" + long_text + R"("}]})", 1);
  ASSERT_TRUE(long_reply.ok()) << long_reply.status();
  EXPECT_EQ(long_reply->choices[0].text, long_text);
  auto short_reply =
      ParseCompletionsReply(R"({"choices":[{"index":0,"text":"ab"}]})", 1);
  ASSERT_TRUE(short_reply.ok()) << short_reply.status();
  EXPECT_EQ(short_reply->choices[0].text, "ab");
}

TEST(OpenAiProtocolTest, MalformedJsonIsDataLoss) {
  auto reply = ParseCompletionsReply("{not json", 1);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(reply.status().message(), HasSubstr("not valid JSON"));
}

TEST(OpenAiProtocolTest, MissingChoicesIsDataLoss) {
  auto reply = ParseCompletionsReply(R"({"id":"x"})", 1);
  ASSERT_FALSE(reply.ok());
  EXPECT_THAT(reply.status().message(), HasSubstr("no \"choices\""));
}

TEST(OpenAiProtocolTest, WrongChoiceCountIsDataLoss) {
  auto reply =
      ParseCompletionsReply(R"({"choices":[{"index":0,"text":"a"}]})", 2);
  ASSERT_FALSE(reply.ok());
  EXPECT_THAT(reply.status().message(), HasSubstr("1 choices, expected 2"));
}

TEST(OpenAiProtocolTest, DuplicateChoiceIndexIsDataLoss) {
  auto reply = ParseCompletionsReply(
      R"({"choices":[{"index":0,"text":"a"},{"index":0,"text":"b"}]})", 2);
  ASSERT_FALSE(reply.ok());
  EXPECT_THAT(reply.status().message(), HasSubstr("unexpected choice index 0"));
}

TEST(OpenAiProtocolTest, ChoiceWithoutTextIsDataLoss) {
  auto reply = ParseCompletionsReply(R"({"choices":[{"index":0}]})", 1);
  ASSERT_FALSE(reply.ok());
  EXPECT_THAT(reply.status().message(), HasSubstr("has no \"text\""));
  auto chat = ParseChatReply(R"({"choices":[{"index":0,"message":{}}]})", 1);
  ASSERT_FALSE(chat.ok());
  EXPECT_THAT(chat.status().message(), HasSubstr("message.content"));
}

TEST(OpenAiProtocolTest, OpenAiErrorBodyGivesCodeAndMessage) {
  absl::Status status = StatusFromHttpError(
      400, R"({"error":{"message":"max_tokens is too large","type":"x"}})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "backend returned HTTP 400: max_tokens is too large");
}

TEST(OpenAiProtocolTest, HttpStatusesMapToCodes) {
  EXPECT_EQ(StatusFromHttpError(429, "{}").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromHttpError(503, "").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromHttpError(500, "").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(StatusFromHttpError(404, "").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusFromHttpError(401, "").code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(OpenAiProtocolTest, NonJsonErrorBodyIsQuoted) {
  absl::Status status = StatusFromHttpError(502, "Bad Gateway");
  EXPECT_EQ(status.message(), "backend returned HTTP 502: Bad Gateway");
  EXPECT_EQ(StatusFromHttpError(500, R"({"message":"boom"})").message(),
            "backend returned HTTP 500: boom");
}

// A token budget's reservation: the whole body at 4 bytes a token (above
// the prompt's own tokens), and the most it may generate.
TEST(EstimateRequestTokensTest, ReservesTheBodyAndMaxTokensTimesNPerPrompt) {
  const std::string batched =
      R"({"prompt":["a b","c d","e f"],"max_tokens":16,"n":2})";
  TokenCost cost = EstimateRequestTokens(batched);
  EXPECT_EQ(cost.input, static_cast<int64_t>((batched.size() + 3) / 4));
  EXPECT_EQ(cost.output, 16 * 2 * 3);
  // Chat's newer name for the maximum; no n is one.
  cost =
      EstimateRequestTokens(R"({"messages":[{"role":"user","content":"hi"}],)"
                            R"("max_completion_tokens":50})");
  EXPECT_EQ(cost.output, 50);
  // No maximum: nothing reserved for the output (the reply settles it).
  EXPECT_EQ(EstimateRequestTokens(R"({"prompt":"q"})").output, 0);
  EXPECT_EQ(EstimateRequestTokens("not json").input, 2);
}

TEST(ReplyUsageTest, CompletionTokensAreFoundFromTheEnd) {
  EXPECT_EQ(ReplyCompletionTokens(
                R"({"choices":[{"text":"say \"completion_tokens\": 99"}],)"
                R"("usage":{"prompt_tokens":3,"completion_tokens" : 12,)"
                R"("total_tokens":15}})"),
            12);
  // The key only inside a generated text (its quotes escaped) is no usage.
  EXPECT_EQ(ReplyCompletionTokens(
                R"({"choices":[{"text":"\"completion_tokens\": 99"}]})"),
            0);
  EXPECT_EQ(ReplyCompletionTokens(R"({"usage":{"completion_tokens":null}})"),
            0);
  EXPECT_EQ(ReplyCompletionTokens("not json"), 0);
}

TEST(ReplyUsageTest, ReadsTheUsageOrNothing) {
  std::optional<TokenCost> usage = ReplyUsage(
      R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9,)"
      R"("total_tokens":16}})");
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ(usage->input, 7);
  EXPECT_EQ(usage->output, 9);
  EXPECT_FALSE(ReplyUsage(R"({"choices":[]})").has_value());
  EXPECT_FALSE(ReplyUsage("<html>").has_value());
}

}  // namespace
}  // namespace sdg
