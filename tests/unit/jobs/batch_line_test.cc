#include "server/jobs/batch_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sdg {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// The example line of OpenAI's Batch API guide.
constexpr char kOpenAiExample[] =
    R"({"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "system", "content": "You are a helpful assistant."},{"role": "user", "content": "Hello world!"}],"max_tokens": 1000}})";
// vLLM's run-batch example (examples/offline_inference/openai_batch).
constexpr char kVllmExample[] =
    R"({"custom_id": "request-2", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "meta-llama/Meta-Llama-3-8B-Instruct", "messages": [{"role": "system", "content": "You are an unhelpful assistant."},{"role": "user", "content": "Hello world!"}],"max_completion_tokens": 1000}})";

TEST(BatchLineTest, OpenAisAndVllmsExampleLinesParse) {
  ParsedBatchLine openai = ParseBatchLine(kOpenAiExample, 1);
  ASSERT_TRUE(openai.line.has_value()) << openai.error.message();
  EXPECT_EQ(openai.line->custom_id, "request-1");
  EXPECT_EQ(openai.line->url, "/v1/chat/completions");
  EXPECT_EQ(openai.line->model, "gpt-3.5-turbo-0125");
  // The body goes on as sent: the same JSON, its keys in their order.
  EXPECT_EQ(json::parse(openai.line->body),
            json::parse(kOpenAiExample)["body"]);
  EXPECT_LT(openai.line->body.find("\"model\""),
            openai.line->body.find("\"messages\""));

  ParsedBatchLine vllm = ParseBatchLine(kVllmExample, 2);
  ASSERT_TRUE(vllm.line.has_value()) << vllm.error.message();
  EXPECT_EQ(vllm.line->model, "meta-llama/Meta-Llama-3-8B-Instruct");
  EXPECT_THAT(vllm.line->body, HasSubstr("\"max_completion_tokens\":1000"));
}

TEST(BatchLineTest, ABodysValuesGoOnUnchanged) {
  // Numbers, escapes and text beyond ASCII come out meaning the same.
  const char kLine[] =
      R"({"custom_id": "x", "method": "POST", "url": "/v1/completions", )"
      R"("body": {"model": "m", "temperature": 0.7, "top_p": 1.0, )"
      R"("seed": 9007199254740993, "logit_bias": {"50256": -100}, )"
      R"("stop": ["\n", "\u00e9t\u00e9", "\"q\""], "prompt": "\u65e5\u672c"}})";
  ParsedBatchLine parsed = ParseBatchLine(kLine, 1);
  ASSERT_TRUE(parsed.line.has_value()) << parsed.error.message();
  const json body = json::parse(parsed.line->body);
  EXPECT_EQ(body, json::parse(kLine)["body"]);
  EXPECT_EQ(body["seed"].get<int64_t>(), 9007199254740993);
  EXPECT_EQ(body["stop"][1], "\u00e9t\u00e9");
  EXPECT_EQ(body["prompt"], "\u65e5\u672c");
}

TEST(BatchLineTest, EachMistakeIsNamedWithItsLineAndField) {
  struct Case {
    const char* text;
    const char* code;
    const char* param;
  };
  const Case cases[] = {
      {"{\"custom_id\": ", "invalid_json_line", ""},
      {"[1, 2]", "invalid_json_line", ""},
      {"", "invalid_json_line", ""},
      {R"({"method": "POST", "url": "/v1/completions", "body": {}})",
       "missing_required_parameter", "custom_id"},
      {R"({"custom_id": "", "method": "POST", "url": "/v1/completions", "body": {}})",
       "missing_required_parameter", "custom_id"},
      {R"({"custom_id": "a", "method": "GET", "url": "/v1/completions", "body": {}})",
       "invalid_method", "method"},
      {R"({"custom_id": "a", "method": "POST", "body": {}})",
       "missing_required_parameter", "url"},
      {R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": "x"})",
       "missing_required_parameter", "body"},
  };
  for (const Case& c : cases) {
    ParsedBatchLine parsed = ParseBatchLine(c.text, 7);
    EXPECT_FALSE(parsed.line.has_value()) << c.text;
    EXPECT_EQ(parsed.error.code(), c.code) << c.text;
    EXPECT_EQ(parsed.error.param(), c.param) << c.text;
    EXPECT_EQ(parsed.error.line(), 7) << c.text;
    EXPECT_FALSE(parsed.error.message().empty());
  }
}

TEST(BatchLineTest, ABodyPastSdgdsOwnBoundsFailsNamingTheField) {
  BatchFileValidator validator("/v1/completions",
                               [](const std::string&) { return true; },
                               {/*max_samples=*/4, /*max_body_bytes=*/200});
  auto line = [](json body) {
    body["model"] = "m";
    return json{{"custom_id", body.dump()},
                {"method", "POST"},
                {"url", "/v1/completions"},
                {"body", body}}
        .dump();
  };
  validator.Add(line({{"prompt", "fine"},
                      {"n", 4},
                      {"temperature", 0},
                      {"top_p", 1},
                      {"max_tokens", 0}}));
  validator.Add(line({{"n", 5}}));
  validator.Add(line({{"n", 0}}));
  validator.Add(line({{"n", 1.5}}));
  validator.Add(line({{"max_tokens", -1}}));
  validator.Add(line({{"temperature", -0.5}}));
  validator.Add(line({{"top_p", 0}}));
  validator.Add(line({{"prompt", std::string(300, 'x')}}));
  ASSERT_EQ(validator.errors().size(), 7u);
  const char* params[] = {
      "body.n",           "body.n",     "body.n", "body.max_tokens",
      "body.temperature", "body.top_p", "body"};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(validator.errors()[i].line(), static_cast<int64_t>(i) + 2);
    EXPECT_EQ(validator.errors()[i].code(), "invalid_value");
    EXPECT_EQ(validator.errors()[i].param(), params[i]);
  }
  EXPECT_THAT(validator.errors()[0].message(), HasSubstr("from 1 to 4"));
  EXPECT_THAT(validator.errors()[6].message(),
              HasSubstr("longer than 200 bytes (the server's "
                        "--max_prompt_bytes)"));
}

TEST(BatchLineTest, TheValidatorChecksUrlUniqueIdsAndModelsInOrder) {
  BatchFileValidator validator(
      "/v1/chat/completions",
      [](const std::string& model) { return model == "served"; });
  auto line = [](const std::string& id, const std::string& url,
                 const std::string& model) {
    return json{{"custom_id", id},
                {"method", "POST"},
                {"url", url},
                {"body", {{"model", model}}}}
        .dump();
  };
  validator.Add(line("a", "/v1/chat/completions", "served"));
  validator.Add(line("b", "/v1/completions", "served"));
  validator.Add(line("a", "/v1/chat/completions", "served"));
  validator.Add(line("c", "/v1/chat/completions", "elsewhere"));
  validator.Add(json{{"custom_id", "d"},
                     {"method", "POST"},
                     {"url", "/v1/chat/completions"},
                     {"body", json::object()}}
                    .dump());
  validator.Add(line("e", "/v1/chat/completions", "served"));
  EXPECT_EQ(validator.lines(), 6);
  EXPECT_EQ(validator.error_count(), 4);
  ASSERT_EQ(validator.errors().size(), 4u);
  EXPECT_EQ(validator.errors()[0].line(), 2);
  EXPECT_EQ(validator.errors()[0].code(), "url_mismatch");
  EXPECT_EQ(validator.errors()[1].line(), 3);
  EXPECT_EQ(validator.errors()[1].code(), "duplicate_custom_id");
  EXPECT_EQ(validator.errors()[2].line(), 4);
  EXPECT_EQ(validator.errors()[2].code(), "model_not_found");
  EXPECT_THAT(validator.errors()[2].message(), HasSubstr("\"elsewhere\""));
  EXPECT_EQ(validator.errors()[3].line(), 5);
  EXPECT_EQ(validator.errors()[3].param(), "body.model");
  // The lines name several models: the batch names none.
  EXPECT_EQ(validator.model(), "");

  BatchFileValidator one_model("/v1/chat/completions",
                               [](const std::string&) { return true; });
  one_model.Add(line("a", "/v1/chat/completions", "served"));
  one_model.Add(line("b", "/v1/chat/completions", "served"));
  EXPECT_EQ(one_model.model(), "served");
}

TEST(BatchLineTest, OutputAndErrorLinesHaveOpenAisShape) {
  const std::string output =
      BatchOutputLine("job1", 4, "request-5", 200, "req-x",
                      R"({"id":"chatcmpl-1","choices":[{"index":0}]})");
  EXPECT_EQ(json::parse(output),
            json::parse(R"({"id": "batch_req_job1_4", "custom_id": "request-5",
              "response": {"status_code": 200, "request_id": "req-x",
                "body": {"id": "chatcmpl-1", "choices": [{"index": 0}]}},
              "error": null})"));

  const json refused = json::parse(
      BatchErrorLine("job1", 1, "request-2", 400, "invalid_request_error",
                     "\"max_tokens\" must be a positive integer"));
  EXPECT_EQ(refused["response"]["status_code"], 400);
  EXPECT_EQ(refused["response"]["body"]["error"]["message"],
            "\"max_tokens\" must be a positive integer");
  EXPECT_TRUE(refused["error"].is_null());

  const json never_sent = json::parse(BatchErrorLine(
      "job1", 9, "quote\"d", 0, "batch_cancelled", "cancelled by the client"));
  EXPECT_TRUE(never_sent["response"].is_null());
  EXPECT_EQ(never_sent["custom_id"], "quote\"d");
  EXPECT_EQ(never_sent["error"],
            json({{"code", "batch_cancelled"},
                  {"message", "cancelled by the client"}}));
}

TEST(BatchLineTest, AFileRowHoldsItsLineAsSent) {
  const std::string text = "  {\"custom_id\": \"x\"}\t";
  EXPECT_EQ(RowLine(LineRow(text)), text);
  EXPECT_EQ(CustomIdOf(text), "x");
  EXPECT_EQ(CustomIdOf("not json"), "");
  EXPECT_EQ(RowLine(google::protobuf::Struct()), "");
}

TEST(EncodedRowLineTest, ReadsTheLineOfAStoredFileRowAsParsingWould) {
  for (const std::string& line :
       {std::string(), std::string("{\"custom_id\":\"a\"}"),
        std::string(200, 'x'), std::string(70000, 'y'),
        std::string("caf\xc3\xa9 \x00 end", 11)}) {
    const std::string encoded = LineRow(line).SerializeAsString();
    std::optional<absl::string_view> read = EncodedRowLine(encoded);
    ASSERT_TRUE(read.has_value()) << line.size();
    EXPECT_EQ(*read, line);
  }
}

TEST(EncodedRowLineTest, AnyOtherRowIsLeftToTheParser) {
  google::protobuf::Struct two = LineRow("a");
  (*two.mutable_fields())["other"].set_string_value("b");
  google::protobuf::Struct number;
  (*number.mutable_fields())["line"].set_number_value(1);
  google::protobuf::Struct named;
  (*named.mutable_fields())["lines"].set_string_value("a");
  for (const google::protobuf::Struct& row :
       {two, number, named, google::protobuf::Struct()}) {
    EXPECT_FALSE(EncodedRowLine(row.SerializeAsString()).has_value())
        << row.ShortDebugString();
  }
  // Cut short anywhere: never read past the end.
  const std::string whole = LineRow("hello").SerializeAsString();
  for (size_t size = 0; size < whole.size(); ++size) {
    EXPECT_FALSE(EncodedRowLine(absl::string_view(whole).substr(0, size)))
        << size;
  }
}

TEST(ReadFileLinesTest, ReadsAnyRangeAcrossItsReadWindows) {
  std::unique_ptr<DatasetBuilder> builder = DatasetBuilder::InMemory();
  for (int i = 0; i < 2500; ++i) {
    ASSERT_TRUE(builder->Add(LineRow(absl::StrCat("line ", i))).ok());
  }
  google::protobuf::Struct other;
  (*other.mutable_fields())["q"].set_string_value("not a line");
  ASSERT_TRUE(builder->Add(other).ok());
  std::shared_ptr<Dataset> file = *builder->Finish();

  std::vector<std::string> lines;
  ASSERT_TRUE(ReadFileLines(*file, 1000, 1501, [&](absl::string_view line) {
                lines.emplace_back(line);
                return absl::OkStatus();
              }).ok());
  ASSERT_EQ(lines.size(), 1501u);
  EXPECT_EQ(lines.front(), "line 1000");
  EXPECT_EQ(lines[1023], "line 2023");
  EXPECT_EQ(lines[1024], "line 2024");
  EXPECT_EQ(lines[1499], "line 2499");
  EXPECT_EQ(lines.back(), "");  // a row that holds no line
}

}  // namespace
}  // namespace sdg
