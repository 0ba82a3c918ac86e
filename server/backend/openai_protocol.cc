#include "server/backend/openai_protocol.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "sdg/v1/block_defaults.h"

namespace sdg {
namespace {

using nlohmann::json;

// Request bodies are written straight into one string rather than built as
// a JSON DOM and dumped: the prompt is most of a body, and nlohmann's
// escaping went through it a byte at a time (6.6 % of sdgd's CPU with 3 KB
// rows; bench/README.md).
// RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    uint32_t code_point;
    uint32_t smallest;
    if ((lead & 0xe0) == 0xc0) {
      length = 2, code_point = lead & 0x1f, smallest = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3, code_point = lead & 0x0f, smallest = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4, code_point = lead & 0x07, smallest = 0x10000;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3f);
    }
    if (code_point < smallest || code_point > 0x10ffff ||
        (code_point >= 0xd800 && code_point <= 0xdfff)) {
      return false;
    }
    i += length;
  }
  return true;
}

void AppendJsonString(absl::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  if (!IsValidUtf8(text)) {
    // Not reached from requests (protobuf strings are UTF-8), but a body
    // must stay JSON whatever it carries: invalid bytes become U+FFFD, as
    // nlohmann's replace handler writes them.
    out.append(json(std::string(text))
                   .dump(-1, ' ', false, json::error_handler_t::replace));
    return;
  }
  out.push_back('"');
  size_t run = 0;  // start of the bytes not yet appended
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xf]);
    }
  }
  out.append(text.data() + run, text.size() - run);
  out.push_back('"');
}

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
