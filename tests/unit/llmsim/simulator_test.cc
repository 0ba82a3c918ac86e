#include "tools/llmsim/simulator.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/llmsim/sim_server.h"

namespace sdg::llmsim {
namespace {

using ::nlohmann::json;

TEST(SimulatorTest, TextIsSamplePrefixPlusPrompt) {
  SimText text = MakeSimText("What is  2+2?", 1, -1);
  EXPECT_EQ(text.text, "sim(1): What is  2+2?");
  EXPECT_EQ(text.finish_reason, "stop");
  EXPECT_EQ(text.tokens, 4);
}

TEST(SimulatorTest, TextIsCutAtMaxTokens) {
  SimText text = MakeSimText("one two three four", 0, 3);
  EXPECT_EQ(text.text, "sim(0): one two");
  EXPECT_EQ(text.finish_reason, "length");
  EXPECT_EQ(text.tokens, 3);
}

TEST(SimulatorTest, PromptListWithNOrdersChoicesLikeVllm) {
  Simulator sim{"m"};
  SimReply reply = sim.Completions(R"({"model":"m","prompt":["a","b"],"n":2})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = json::parse(reply.body);
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["choices"][3]["index"], 3);
  EXPECT_EQ(body["choices"][3]["text"], "sim(1): b");
  EXPECT_EQ(body["choices"][1]["text"], "sim(1): a");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(body["usage"]["completion_tokens"], 8);
  EXPECT_EQ(reply.prompts, 2);
  // What /stats sums: the reply's own usage.
  EXPECT_EQ(reply.prompt_tokens, 2);
  EXPECT_EQ(reply.completion_tokens, 8);
}

TEST(SimulatorTest, ChatAnswersTheLastUserMessage) {
  Simulator sim{"m"};
  SimReply reply = sim.ChatCompletions(
      R"({"model":"m","messages":[{"role":"system","content":"s"},
          {"role":"user","content":"first"},{"role":"assistant","content":"x"},
          {"role":"user","content":"second"}]})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = json::parse(reply.body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "sim(0): second");
}

TEST(SimulatorTest, MalformedRequestsGet400WithOpenAiError) {
  Simulator sim{"m"};
  for (const char* request :
       {"{oops", R"({"model":"m"})", R"({"model":"m","prompt":[1]})",
        R"({"model":"m","prompt":"x","n":0})"}) {
    SimReply reply = sim.Completions(request);
    EXPECT_EQ(reply.status, 400) << request;
    json body = json::parse(reply.body);
    EXPECT_TRUE(body["error"]["message"].is_string()) << request;
  }
}

TEST(SimulatorTest, UnknownModelGets404) {
  Simulator sim{"m"};
  SimReply reply = sim.Completions(R"({"model":"other","prompt":"x"})");
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(json::parse(reply.body)["error"]["message"],
            "The model `other` does not exist.");
}

TEST(SimulatorTest, ModelsReportsVllmOwnership) {
  json body = json::parse(Simulator{"m"}.Models().body);
  EXPECT_EQ(body["data"][0]["id"], "m");
  EXPECT_EQ(body["data"][0]["owned_by"], "vllm");
}

TEST(SimServerTest, AnUnknownFaultScriptStepIsRejectedByName) {
  SimServer::Options options;
  options.fault_script = "hang,explode";
  absl::StatusOr<std::unique_ptr<SimServer>> server =
      SimServer::Create(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.status().message(),
            "fault_script: unknown step \"explode\"; use ok, hang, reset, "
            "malformed, slow or an HTTP status 400-599");
}

}  // namespace
}  // namespace sdg::llmsim

namespace sdg::llmsim {
namespace {

std::shared_ptr<const ReplyBook> Book(absl::string_view lines) {
  absl::StatusOr<ReplyBook> book = ReplyBook::Parse(lines);
  EXPECT_TRUE(book.ok()) << book.status();
  return std::make_shared<const ReplyBook>(*std::move(book));
}

TEST(ReplyBookTest, FirstLineWhoseSubstringsAllAppearGivesTheReply) {
  Simulator sim{"m"};
  sim.replies =
      Book(R"({"match": ["Judge", "tide"], "reply": "[Answer] YES [End]"})"
           "\n"
           R"({"match": "Judge", "reply": "[Answer] NO [End]"})"
           "\n"
           R"({"match": "Ask", "reply": "[Question] Q{{i}} [Answer] A{{i}}"})");
  json reply = json::parse(
      sim.Completions(
             R"({"model":"m","prompt":["Judge: tide","Judge: moon","Ask","Hi"],"n":2})")
          .body);
  std::vector<std::string> texts;
  for (const json& choice : reply["choices"]) texts.push_back(choice["text"]);
  EXPECT_EQ(texts, (std::vector<std::string>{
                       "[Answer] YES [End]", "[Answer] YES [End]",
                       "[Answer] NO [End]", "[Answer] NO [End]",
                       "[Question] Q0 [Answer] A0", "[Question] Q1 [Answer] A1",
                       // No line matches: the echo.
                       "sim(0): Hi", "sim(1): Hi"}));
}

TEST(ReplyBookTest, PromptHashDiffersByPromptAndRepeatsForTheSame) {
  Simulator sim{"m"};
  sim.replies = Book(R"({"match": "Ask", "reply": "Q {{prompt_hash}}"})");
  json reply = json::parse(
      sim.Completions(
             R"({"model":"m","prompt":["Ask a","Ask b","Ask a"],"n":1})")
          .body);
  const std::string a = reply["choices"][0]["text"];
  EXPECT_EQ(a.size(), 2u + 8u);
  EXPECT_NE(reply["choices"][1]["text"], a);
  EXPECT_EQ(reply["choices"][2]["text"], a);
}

TEST(ReplyBookTest, ChatMatchesAcrossEveryMessage) {
  Simulator sim{"m"};
  sim.replies = Book(R"({"match": ["careful", "tide"], "reply": "ok"})");
  json reply = json::parse(sim.ChatCompletions(
                                  R"({"model":"m","messages":[
        {"role":"system","content":"Be careful."},
        {"role":"user","content":"What is a tide?"}]})")
                               .body);
  EXPECT_EQ(reply["choices"][0]["message"]["content"], "ok");
}

TEST(ReplyBookTest, RepliesAreCutAtMaxTokens) {
  Simulator sim{"m"};
  sim.replies = Book(R"({"match": "x", "reply": "one two three"})");
  json reply = json::parse(
      sim.Completions(R"({"model":"m","prompt":"x","max_tokens":2})").body);
  EXPECT_EQ(reply["choices"][0]["text"], "one two");
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
}

TEST(ReplyBookTest, ABadLineIsNamed) {
  EXPECT_EQ(
      ReplyBook::Parse("\n{\"match\": 1, \"reply\": \"r\"}").status().message(),
      "replies line 2: \"match\" must be a string or a list of strings");
  EXPECT_EQ(ReplyBook::Parse(R"({"match": "a"})").status().message(),
            "replies line 1: \"reply\" must be a string");
  EXPECT_EQ(ReplyBook::Parse("not json").status().message(),
            "replies line 1: not a JSON object");
}

}  // namespace
}  // namespace sdg::llmsim
