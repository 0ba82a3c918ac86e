// The OpenAI-compatible wire format: request bodies for /completions and
// /chat/completions, and parsing of their replies and error bodies. Pure
// functions; the transport lives in http_client.h.
#ifndef SDG_SERVER_BACKEND_OPENAI_PROTOCOL_H_
#define SDG_SERVER_BACKEND_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdg/v1/generation.pb.h"

namespace sdg {

inline constexpr absl::string_view kCompletionsPath = "/completions";
inline constexpr absl::string_view kChatCompletionsPath = "/chat/completions";

// Bodies are written as text, not built as a JSON DOM. Prompts and the
// block's strings are UTF-8 (they come from protobuf strings) and go into
// the body as they are, with '"', '\\' and control characters escaped; a
// string that is not UTF-8 has its invalid bytes replaced by U+FFFD.

// A /completions body for one or more prompts. With several prompts the reply
// holds prompts.size() * n choices, index = prompt_index * n + sample_index
// (vLLM's order).
std::string BuildCompletionsBody(const v1::Block& block,
                                 const std::vector<std::string>& prompts);

// A /chat/completions body: the block's system prompt, then `prompt` as the
// user message.
std::string BuildChatBody(const v1::Block& block, absl::string_view prompt);

struct Choice {
  std::string text;
  std::string finish_reason;
};

struct Completion {
  // choices[i] is the choice whose index is i.
  std::vector<Choice> choices;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Tokens of a request, or of its reply: prompt (input) and completion
// (output).
struct TokenCost {
  int64_t input = 0;
  int64_t output = 0;
};

// What a request body may cost before it is sent, for a token budget: its
// prompt estimated at a token per 4 bytes of the whole body (an estimate
// above the prompt's own tokens, settled with the reply's usage), and the
// most it may generate: max_tokens (or max_completion_tokens) × n × the
// prompts it carries; 0 output when it sets no maximum. A body that is not
// a JSON object costs its bytes / 4 as input.
TokenCost EstimateRequestTokens(absl::string_view body);

// A 2xx reply's `usage` (prompt_tokens, completion_tokens); nullopt when it
// has none or is not JSON.
std::optional<TokenCost> ReplyUsage(absl::string_view body);
// The same reply's usage.completion_tokens, found from the end of the body
// without parsing it (usage comes last in vLLM's, llama.cpp's and OpenAI's
// replies, and a generated text's quotes are escaped, so it cannot fake
// the key); 0 when there is none.
int64_t ReplyCompletionTokens(absl::string_view body);

// Parses a 2xx reply. Fails with DATA_LOSS when the body is not JSON or lacks
// `choices`, or when the choice indexes are not exactly 0..expected_choices-1;
// the message says what was wrong.
absl::StatusOr<Completion> ParseCompletionsReply(absl::string_view body,
                                                 int expected_choices);
absl::StatusOr<Completion> ParseChatReply(absl::string_view body,
                                          int expected_choices);

// The status for a non-2xx reply: the code follows the HTTP status and the
// message carries the backend's own error message when the body has one
// (OpenAI's {"error":{"message":...}}, or a plain {"message":...}).
absl::Status StatusFromHttpError(long http_code, absl::string_view body);

// Whether a non-2xx reply says the server takes one choice per request:
// llama.cpp refuses any n other than 1 with HTTP 500 and these words, for
// completions and chat alike.
bool IsChoiceCountRefusal(long http_code, absl::string_view body);

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_OPENAI_PROTOCOL_H_
