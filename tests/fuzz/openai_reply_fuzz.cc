// A backend's reply bodies, as sdgd parses them: completions and chat
// replies for one to four choices, and error bodies for any status. The
// same bytes as a prompt and a system prompt: the request bodies sdgd
// writes must be JSON, holding exactly the prompt when it is UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "google/protobuf/stubs/common.h"
#include "server/backend/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int choices = 1 + data[0] % 4;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  (void)sdg::ParseCompletionsReply(body, choices);
  (void)sdg::ParseChatReply(body, choices);
  (void)sdg::StatusFromHttpError(400 + data[0] % 200, body);

  const bool utf8 = google::protobuf::internal::IsStructurallyValidUTF8(
      body.data(), static_cast<int>(body.size()));
  sdg::v1::Block block;
  block.set_model("m");
  // Cut anywhere, so possibly inside a character: not UTF-8 either.
  block.set_system_prompt(std::string(body.substr(0, body.size() / 2)));
  const std::string prompt(body);
  auto chat =
      nlohmann::json::parse(sdg::BuildChatBody(block, prompt), nullptr, false);
  if (chat.is_discarded() ||
      (utf8 &&
       chat["messages"].back()["content"].get<std::string>() != prompt)) {
    std::abort();
  }
  auto completions = nlohmann::json::parse(
      sdg::BuildCompletionsBody(block, {prompt, prompt}), nullptr, false);
  if (completions.is_discarded() ||
      (utf8 && completions["prompt"][1].get<std::string>() != prompt)) {
    std::abort();
  }
  return 0;
}
