#include "server/backend/tokenize_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sdg {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

v1::Block ChatBlock() {
  v1::Block block;
  block.set_model("m");
  block.set_api(v1::API_CHAT);
  block.set_system_prompt("be brief");
  return block;
}

TEST(TokenizeProtocolTest, VllmCountsChatMessagesWithTheGenerationPrompt) {
  TokenizerRequest request =
      FirstTokenizerRequest(ServerKind::kVllm, ChatBlock(), "why?");
  EXPECT_EQ(request.path, "/tokenize");
  EXPECT_EQ(json::parse(request.body),
            json::parse(R"({"model": "m", "add_generation_prompt": true,
                "messages": [{"role": "system", "content": "be brief"},
                             {"role": "user", "content": "why?"}]})"));
}

TEST(TokenizeProtocolTest, VllmCountsACompletionsPrompt) {
  v1::Block block;
  block.set_model("m");
  TokenizerRequest request =
      FirstTokenizerRequest(ServerKind::kVllm, block, "Q: why?");
  EXPECT_EQ(json::parse(request.body),
            json::parse(R"({"model": "m", "prompt": "Q: why?"})"));
}

TEST(TokenizeProtocolTest, LlamaCppAppliesItsChatTemplateFirst) {
  TokenizerRequest request =
      FirstTokenizerRequest(ServerKind::kLlamaCpp, ChatBlock(), "why?");
  EXPECT_EQ(request.path, "/apply-template");
  EXPECT_EQ(json::parse(request.body), json::parse(R"({"messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "why?"}]})"));
  EXPECT_EQ(*ParseApplyTemplateReply(R"({"prompt": "<s>be brief why?"})"),
            "<s>be brief why?");
  TokenizerRequest tokenize = LlamaCppTokenizeRequest("<s>be brief why?");
  EXPECT_EQ(tokenize.path, "/tokenize");
  EXPECT_EQ(json::parse(tokenize.body),
            json::parse(R"({"content": "<s>be brief why?",
                            "add_special": true})"));
}

TEST(TokenizeProtocolTest, RepliesAreCountedFromCountOrTokens) {
  EXPECT_EQ(*ParseTokenizeReply(R"({"count": 7, "max_model_len": 4096,
                                    "tokens": [1, 2]})"),
            7);
  EXPECT_EQ(*ParseTokenizeReply(R"({"tokens": [5, 6, 7]})"), 3);
  absl::StatusOr<int64_t> bad = ParseTokenizeReply(R"({"tokenz": []})");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("neither \"count\" nor \"tokens\""));
  EXPECT_EQ(ParseTokenizeReply("<html>").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseApplyTemplateReply("{}").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(TokenizeProtocolTest, OnlyVllmAndLlamaCppServeATokenizer) {
  EXPECT_TRUE(ServesTokenizer(ServerKind::kVllm));
  EXPECT_TRUE(ServesTokenizer(ServerKind::kLlamaCpp));
  EXPECT_FALSE(ServesTokenizer(ServerKind::kOpenAiCompatible));
  EXPECT_FALSE(ServesTokenizer(ServerKind::kUnknown));
}

}  // namespace
}  // namespace sdg
