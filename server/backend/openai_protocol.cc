#include "server/backend/openai_protocol.h"

#include <simdjson.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/json.h"
#include "sdg/v1/block_defaults.h"

namespace sdg {
namespace {

using nlohmann::json;

// The fields both APIs share, after the prompt: `,"model":...` and so on,
// then the closing brace. Numbers that are not integers go through
// nlohmann, for the shortest text that reads back as the same double.
void AppendSamplingFields(const v1::Block& block, std::string& out) {
  out.append(",\"model\":");
  AppendJsonString(block.model(), out);
  absl::StrAppend(&out, ",\"n\":", v1::SamplesPerRowOf(block));
  if (block.max_tokens() > 0) {
    absl::StrAppend(&out, ",\"max_tokens\":", block.max_tokens());
  }
  if (block.has_temperature()) {
    absl::StrAppend(&out,
                    ",\"temperature\":", json(block.temperature()).dump());
  }
  if (block.has_top_p()) {
    absl::StrAppend(&out, ",\"top_p\":", json(block.top_p()).dump());
  }
  if (block.has_seed()) absl::StrAppend(&out, ",\"seed\":", block.seed());
  if (block.stop_size() > 0) {
    out.append(",\"stop\":[");
    for (int i = 0; i < block.stop_size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendJsonString(block.stop(i), out);
    }
    out.push_back(']');
  }
  out.push_back('}');
}

// Replies are parsed with the thread's simdjson parser (its own tape, not
// a DOM of allocated nodes); only the texts are copied out.

int64_t IntegerOr0(simdjson::dom::element number) {
  int64_t integer;
  if (number.get_int64().get(integer) == simdjson::SUCCESS) return integer;
  double real;
  if (number.get_double().get(real) == simdjson::SUCCESS) {
    return static_cast<int64_t>(real);
  }
  return 0;
}

// Reads the reply's `choices` (`expected_choices` of them, each placed at its
// `index`) and its `usage` (optional). `text_of` gives a choice's text, or
// fails when its field is missing or not a string.
template <typename TextOf>
absl::StatusOr<Completion> ParseReply(absl::string_view body,
                                      int expected_choices,
                                      absl::string_view text_field,
                                      TextOf text_of) {
  ThreadJsonParser parser;
  simdjson::dom::element reply;
  if (parser.Parse(body, reply) != simdjson::SUCCESS) {
    return absl::DataLossError(absl::StrCat(
        "backend reply was not valid JSON (", body.size(), " bytes)"));
  }
  simdjson::dom::object object;
  simdjson::dom::array choices;
  if (reply.get_object().get(object) != simdjson::SUCCESS ||
      object["choices"].get_array().get(choices) != simdjson::SUCCESS) {
    return absl::DataLossError("backend reply has no \"choices\" array");
  }
  Completion out;
  simdjson::dom::object usage;
  if (object["usage"].get_object().get(usage) == simdjson::SUCCESS) {
    simdjson::dom::element count;
    if (usage["prompt_tokens"].get(count) == simdjson::SUCCESS) {
      out.prompt_tokens = IntegerOr0(count);
    }
    if (usage["completion_tokens"].get(count) == simdjson::SUCCESS) {
      out.completion_tokens = IntegerOr0(count);
    }
  }
  if (static_cast<int>(choices.size()) != expected_choices) {
    return absl::DataLossError(
        absl::StrCat("backend reply has ", choices.size(),
                     " choices, expected ", expected_choices));
  }
  out.choices.assign(expected_choices, Choice{});
  std::vector<bool> seen(expected_choices, false);
  for (simdjson::dom::element element : choices) {
    simdjson::dom::object choice;
    if (element.get_object().get(choice) != simdjson::SUCCESS) {
      return absl::DataLossError(
          "backend reply has a choice that is not an object");
    }
    int64_t i;
    if (choice["index"].get_int64().get(i) != simdjson::SUCCESS) {
      return absl::DataLossError(
          "backend reply has a choice without \"index\"");
    }
    if (i < 0 || i >= expected_choices || seen[i]) {
      return absl::DataLossError(
          absl::StrCat("backend reply has an unexpected choice index ", i));
    }
    std::string_view text;
    if (text_of(choice).get(text) != simdjson::SUCCESS) {
      return absl::DataLossError(absl::StrCat("backend reply choice ", i,
                                              " has no \"", text_field, "\""));
    }
    seen[i] = true;
    out.choices[i].text = std::string(text);
    std::string_view reason;
    if (choice["finish_reason"].get_string().get(reason) == simdjson::SUCCESS) {
      out.choices[i].finish_reason = std::string(reason);
    }
  }
  return out;
}

absl::StatusCode CodeForHttpStatus(long http_code) {
  switch (http_code) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 408:
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    case 409:
      return absl::StatusCode::kAborted;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 502:
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return http_code >= 500 ? absl::StatusCode::kInternal
                              : absl::StatusCode::kUnknown;
  }
}

// The integer at `key` of `object`, or 0.
int64_t IntegerAt(simdjson::dom::object object, std::string_view key) {
  simdjson::dom::element value;
  if (object[key].get(value) != simdjson::SUCCESS) return 0;
  return IntegerOr0(value);
}

}  // namespace

TokenCost EstimateRequestTokens(absl::string_view body) {
  TokenCost cost;
  // About 4 bytes a token, OpenAI's rule of thumb for English text.
  cost.input = static_cast<int64_t>((body.size() + 3) / 4);
  ThreadJsonParser parser;
  simdjson::dom::element request;
  simdjson::dom::object object;
  if (parser.Parse(body, request) != simdjson::SUCCESS ||
      request.get_object().get(object) != simdjson::SUCCESS) {
    return cost;
  }
  int64_t max_tokens = IntegerAt(object, "max_tokens");
  if (max_tokens <= 0) max_tokens = IntegerAt(object, "max_completion_tokens");
  const int64_t n = std::max<int64_t>(IntegerAt(object, "n"), 1);
  int64_t prompts = 1;
  simdjson::dom::array prompt_list;
  if (object["prompt"].get_array().get(prompt_list) == simdjson::SUCCESS) {
    prompts = std::max<int64_t>(static_cast<int64_t>(prompt_list.size()), 1);
  }
  cost.output = std::max<int64_t>(max_tokens, 0) * n * prompts;
  return cost;
}

std::optional<TokenCost> ReplyUsage(absl::string_view body) {
  ThreadJsonParser parser;
  simdjson::dom::element reply;
  simdjson::dom::object usage;
  if (parser.Parse(body, reply) != simdjson::SUCCESS ||
      reply["usage"].get_object().get(usage) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  return TokenCost{IntegerAt(usage, "prompt_tokens"),
                   IntegerAt(usage, "completion_tokens")};
}

int64_t ReplyCompletionTokens(absl::string_view body) {
  constexpr absl::string_view kKey = "\"completion_tokens\"";
  const size_t key = body.rfind(kKey);
  if (key == absl::string_view::npos) return 0;
  absl::string_view rest = body.substr(key + kKey.size());
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (!absl::ConsumePrefix(&rest, ":")) return 0;
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t digits = 0;
  while (digits < rest.size() && digits < 18 &&
         absl::ascii_isdigit(static_cast<unsigned char>(rest[digits]))) {
    ++digits;
  }
  int64_t tokens = 0;
  if (digits == 0 || !absl::SimpleAtoi(rest.substr(0, digits), &tokens)) {
    return 0;
  }
  return tokens;
}

std::string BuildCompletionsBody(const v1::Block& block,
                                 const std::vector<std::string>& prompts) {
  std::string body;
  size_t prompt_bytes = 0;
  for (const std::string& prompt : prompts) prompt_bytes += prompt.size();
  body.reserve(prompt_bytes + prompts.size() * 8 + 128);
  body.append("{\"prompt\":");
  if (prompts.size() == 1) {
    AppendJsonString(prompts.front(), body);
  } else {
    body.push_back('[');
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (i > 0) body.push_back(',');
      AppendJsonString(prompts[i], body);
    }
    body.push_back(']');
  }
  AppendSamplingFields(block, body);
  return body;
}

std::string BuildChatBody(const v1::Block& block, absl::string_view prompt) {
  std::string body;
  body.reserve(prompt.size() + block.system_prompt().size() + 160);
  body.append("{\"messages\":[");
  if (!block.system_prompt().empty()) {
    body.append("{\"role\":\"system\",\"content\":");
    AppendJsonString(block.system_prompt(), body);
    body.append("},");
  }
  body.append("{\"role\":\"user\",\"content\":");
  AppendJsonString(prompt, body);
  body.append("}]");
  AppendSamplingFields(block, body);
  return body;
}

absl::StatusOr<Completion> ParseCompletionsReply(absl::string_view body,
                                                 int expected_choices) {
  return ParseReply(
      body, expected_choices, "text",
      [](simdjson::dom::object choice) { return choice["text"].get_string(); });
}

absl::StatusOr<Completion> ParseChatReply(absl::string_view body,
                                          int expected_choices) {
  return ParseReply(body, expected_choices, "message.content",
                    [](simdjson::dom::object choice) {
                      return choice["message"]["content"].get_string();
                    });
}

absl::Status StatusFromHttpError(long http_code, absl::string_view body) {
  std::string detail;
  json reply = json::parse(body, nullptr, false);
  if (!reply.is_discarded() && reply.is_object()) {
    const json* holder = &reply;
    if (auto error = reply.find("error");
        error != reply.end() && error->is_object()) {
      holder = &*error;
    }
    if (auto message = holder->find("message");
        message != holder->end() && message->is_string()) {
      detail = message->get<std::string>();
    }
  }
  if (detail.empty()) {
    detail = std::string(body.substr(0, 200));
  }
  return absl::Status(CodeForHttpStatus(http_code),
                      absl::StrCat("backend returned HTTP ", http_code,
                                   detail.empty() ? "" : ": ", detail));
}

bool IsChoiceCountRefusal(long http_code, absl::string_view body) {
  return http_code >= 400 &&
         absl::StrContains(body, "Only one completion choice is allowed");
}

}  // namespace sdg
