#include "server/backend/tokenize_protocol.h"

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sdg {
namespace {

using nlohmann::json;

json ChatMessages(const v1::Block& block, absl::string_view prompt) {
  json messages = json::array();
  if (!block.system_prompt().empty()) {
    messages.push_back(
        {{"role", "system"}, {"content", block.system_prompt()}});
  }
  messages.push_back({{"role", "user"}, {"content", std::string(prompt)}});
  return messages;
}

// Invalid UTF-8 is replaced, as the request bodies do (openai_protocol.h).
std::string Dump(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<json> ParseObject(absl::string_view body,
                                 absl::string_view endpoint) {
  json reply = json::parse(body, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    return absl::DataLossError(absl::StrCat("the backend's ", endpoint,
                                            " reply is not a JSON object"));
  }
  return reply;
}

}  // namespace

bool ServesTokenizer(ServerKind kind) {
  return kind == ServerKind::kVllm || kind == ServerKind::kLlamaCpp;
}

TokenizerRequest FirstTokenizerRequest(ServerKind kind, const v1::Block& block,
                                       absl::string_view prompt) {
  const bool chat = block.api() == v1::API_CHAT;
  if (kind == ServerKind::kLlamaCpp) {
    if (!chat) return LlamaCppTokenizeRequest(prompt);
    return {kApplyTemplatePath,
            Dump({{"messages", ChatMessages(block, prompt)}})};
  }
  json body = {{"model", block.model()}};
  if (chat) {
    body["messages"] = ChatMessages(block, prompt);
    body["add_generation_prompt"] = true;
  } else {
    body["prompt"] = std::string(prompt);
  }
  return {kTokenizePath, Dump(body)};
}

TokenizerRequest LlamaCppTokenizeRequest(absl::string_view text) {
  return {kTokenizePath,
          Dump({{"content", std::string(text)}, {"add_special", true}})};
}

absl::StatusOr<int64_t> ParseTokenizeReply(absl::string_view body) {
  absl::StatusOr<json> reply = ParseObject(body, "/tokenize");
  if (!reply.ok()) return reply.status();
  if (auto count = reply->find("count");
      count != reply->end() && count->is_number_integer()) {
    return count->get<int64_t>();
  }
  if (auto tokens = reply->find("tokens");
      tokens != reply->end() && tokens->is_array()) {
    return static_cast<int64_t>(tokens->size());
  }
  return absl::DataLossError(
      "the backend's /tokenize reply has neither \"count\" nor \"tokens\"");
}

absl::StatusOr<std::string> ParseApplyTemplateReply(absl::string_view body) {
  absl::StatusOr<json> reply = ParseObject(body, "/apply-template");
  if (!reply.ok()) return reply.status();
  auto prompt = reply->find("prompt");
  if (prompt == reply->end() || !prompt->is_string()) {
    return absl::DataLossError(
        "the backend's /apply-template reply has no string \"prompt\"");
  }
  return prompt->get<std::string>();
}

}  // namespace sdg
