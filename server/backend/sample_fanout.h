// Samples for servers that take one choice per request (llama.cpp refuses
// any n other than 1): a request for n samples becomes n requests of one
// sample each, and their n replies one reply, as a server that takes n would
// have answered. Pure functions on the OpenAI wire format.
#ifndef SDG_SERVER_BACKEND_SAMPLE_FANOUT_H_
#define SDG_SERVER_BACKEND_SAMPLE_FANOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/backend/backend.h"

namespace sdg {

// `samples` bodies from a /completions or /chat/completions body: the s-th
// asks for "n": 1 and, when the body has a "seed", seed + s (identical seeds
// would give identical samples). INVALID_ARGUMENT when `body` is not a JSON
// object.
absl::StatusOr<std::vector<std::string>> SplitSamples(absl::string_view body,
                                                      int samples);

// One reply from the replies to SplitSamples' bodies, in sample order: the
// choice j of reply s becomes choice j × samples + s (vLLM's prompt-major
// order; j is the prompt), usage is summed, attempts are the most any sample
// took. A failed sample fails the whole reply with its status ("sample 2 of
// 3: ..."): a row's samples are delivered together or not at all.
BackendReply MergeSamples(std::vector<BackendReply> replies);

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_SAMPLE_FANOUT_H_
