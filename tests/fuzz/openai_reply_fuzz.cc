// A backend's reply bodies, as sdgd parses them: completions and chat
// replies for one to four choices, and error bodies for any status.
#include <cstddef>
#include <cstdint>

#include "server/backend/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int choices = 1 + data[0] % 4;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  (void)sdg::ParseCompletionsReply(body, choices);
  (void)sdg::ParseChatReply(body, choices);
  (void)sdg::StatusFromHttpError(400 + data[0] % 200, body);
  return 0;
}
