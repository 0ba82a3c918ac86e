#include "server/backend/openai_protocol.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "sdg/v1/block_defaults.h"

namespace sdg {
namespace {

using nlohmann::json;

void AddSamplingFields(const v1::Block& block, json& body) {
  body["model"] = block.model();
  body["n"] = v1::SamplesPerRowOf(block);
  if (block.max_tokens() > 0) body["max_tokens"] = block.max_tokens();
  if (block.has_temperature()) body["temperature"] = block.temperature();
  if (block.has_top_p()) body["top_p"] = block.top_p();
  if (block.has_seed()) body["seed"] = block.seed();
  if (block.stop_size() > 0) {
    body["stop"] =
        std::vector<std::string>(block.stop().begin(), block.stop().end());
  }
}

std::string Dump(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Reads `usage` (optional) and checks the shape shared by both APIs.
absl::StatusOr<json> ParseReplyEnvelope(absl::string_view body,
                                        Completion& out) {
  json reply = json::parse(body, nullptr, false);
  if (reply.is_discarded()) {
    return absl::DataLossError(absl::StrCat(
        "backend reply was not valid JSON (", body.size(), " bytes)"));
  }
  if (!reply.is_object() || !reply.contains("choices") ||
      !reply["choices"].is_array()) {
    return absl::DataLossError("backend reply has no \"choices\" array");
  }
  if (auto usage = reply.find("usage");
      usage != reply.end() && usage->is_object()) {
    out.prompt_tokens = usage->value("prompt_tokens", int64_t{0});
    out.completion_tokens = usage->value("completion_tokens", int64_t{0});
  }
  return reply;
}

// Places each choice at its `index`; `text_of` extracts the text from a
// choice object or returns nullptr when the field is missing.
template <typename TextOf>
absl::Status CollectChoices(const json& choices, int expected_choices,
                            absl::string_view text_field, TextOf text_of,
                            Completion& out) {
  if (static_cast<int>(choices.size()) != expected_choices) {
    return absl::DataLossError(
        absl::StrCat("backend reply has ", choices.size(),
                     " choices, expected ", expected_choices));
  }
  out.choices.assign(expected_choices, Choice{});
  std::vector<bool> seen(expected_choices, false);
  for (const json& choice : choices) {
    if (!choice.is_object()) {
      return absl::DataLossError(
          "backend reply has a choice that is not an object");
    }
    auto index = choice.find("index");
    if (index == choice.end() || !index->is_number_integer()) {
      return absl::DataLossError(
          "backend reply has a choice without \"index\"");
    }
    int64_t i = index->get<int64_t>();
    if (i < 0 || i >= expected_choices || seen[i]) {
      return absl::DataLossError(
          absl::StrCat("backend reply has an unexpected choice index ", i));
    }
    const json* text = text_of(choice);
    if (text == nullptr || !text->is_string()) {
      return absl::DataLossError(absl::StrCat("backend reply choice ", i,
                                              " has no \"", text_field, "\""));
    }
    seen[i] = true;
    out.choices[i].text = text->get<std::string>();
    if (auto reason = choice.find("finish_reason");
        reason != choice.end() && reason->is_string()) {
      out.choices[i].finish_reason = reason->get<std::string>();
    }
  }
  return absl::OkStatus();
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

}  // namespace

std::string BuildCompletionsBody(const v1::Block& block,
                                 const std::vector<std::string>& prompts) {
  json body;
  if (prompts.size() == 1) {
    body["prompt"] = prompts.front();
  } else {
    body["prompt"] = prompts;
  }
  AddSamplingFields(block, body);
  return Dump(body);
}

std::string BuildChatBody(const v1::Block& block, absl::string_view prompt) {
  json messages = json::array();
  if (!block.system_prompt().empty()) {
    messages.push_back(
        {{"role", "system"}, {"content", block.system_prompt()}});
  }
  messages.push_back({{"role", "user"}, {"content", prompt}});
  json body;
  body["messages"] = std::move(messages);
  AddSamplingFields(block, body);
  return Dump(body);
}

absl::StatusOr<Completion> ParseCompletionsReply(absl::string_view body,
                                                 int expected_choices) {
  Completion out;
  absl::StatusOr<json> reply = ParseReplyEnvelope(body, out);
  if (!reply.ok()) return reply.status();
  absl::Status status =
      CollectChoices((*reply)["choices"], expected_choices, "text",
                     [](const json& choice) -> const json* {
                       auto it = choice.find("text");
                       return it == choice.end() ? nullptr : &*it;
                     },
                     out);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<Completion> ParseChatReply(absl::string_view body,
                                          int expected_choices) {
  Completion out;
  absl::StatusOr<json> reply = ParseReplyEnvelope(body, out);
  if (!reply.ok()) return reply.status();
  absl::Status status =
      CollectChoices((*reply)["choices"], expected_choices, "message.content",
                     [](const json& choice) -> const json* {
                       auto message = choice.find("message");
                       if (message == choice.end() || !message->is_object())
                         return nullptr;
                       auto content = message->find("content");
                       return content == message->end() ? nullptr : &*content;
                     },
                     out);
  if (!status.ok()) return status;
  return out;
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

}  // namespace sdg
