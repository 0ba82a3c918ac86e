// The tokenizer endpoints of the servers that serve one, for counting a
// prompt's tokens as the server will (EstimateJob): vLLM's POST /tokenize
// (a prompt, or chat messages with the model's chat template applied) and
// llama.cpp's POST /tokenize (text) and POST /apply-template (chat messages
// to the text the model sees). Both sit at the server's root, not under
// /v1. Pure functions; the transport is Backend::PostToServerRoot.
#ifndef SDG_SERVER_BACKEND_TOKENIZE_PROTOCOL_H_
#define SDG_SERVER_BACKEND_TOKENIZE_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdg/v1/generation.pb.h"
#include "server/backend/server_detector.h"

namespace sdg {

inline constexpr absl::string_view kTokenizePath = "/tokenize";
inline constexpr absl::string_view kApplyTemplatePath = "/apply-template";

// Whether sdgd knows how to ask `kind` for token counts.
bool ServesTokenizer(ServerKind kind);

struct TokenizerRequest {
  absl::string_view path;
  std::string body;
};

// The first request that counts `prompt` as `block` sends it: vLLM, one
// /tokenize (the block's messages for chat, with the generation prompt, as
// /chat/completions renders them; the prompt for completions); llama.cpp,
// /tokenize of the prompt, or for chat /apply-template first, whose reply
// then goes to /tokenize (LlamaCppTokenizeRequest).
TokenizerRequest FirstTokenizerRequest(ServerKind kind, const v1::Block& block,
                                       absl::string_view prompt);
// llama.cpp's /tokenize of `text`, with the special tokens its completion
// endpoints add (BOS).
TokenizerRequest LlamaCppTokenizeRequest(absl::string_view text);

// A /tokenize reply's count: vLLM's "count", else the length of "tokens"
// (llama.cpp). DATA_LOSS naming what is wrong otherwise.
absl::StatusOr<int64_t> ParseTokenizeReply(absl::string_view body);
// An /apply-template reply's "prompt".
absl::StatusOr<std::string> ParseApplyTemplateReply(absl::string_view body);

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_TOKENIZE_PROTOCOL_H_
