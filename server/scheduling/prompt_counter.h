// Counting prompts as a backend will see them, for EstimateJob: how its
// server takes requests (batched prompts, one choice per request) and, where
// it serves a tokenizer (vLLM, llama.cpp), each prompt's tokens as the
// run's replies will report them. Nothing is sent to a model.
#ifndef SDG_SERVER_SCHEDULING_PROMPT_COUNTER_H_
#define SDG_SERVER_SCHEDULING_PROMPT_COUNTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "sdg/v1/generation.pb.h"
#include "server/backend/throughput_meter.h"

namespace sdg {

class Backend;

class PromptCounter {
 public:
  // How a backend's server takes a block's requests.
  struct ServerShape {
    bool tokenizer = false;  // it counts tokens (CountTokens)
    // A shard's completions prompts go as one request (vLLM).
    bool batching = false;
    // Each sample of a prompt is a request of its own (llama.cpp).
    bool one_choice_per_request = false;
    // The backend's pace over its last replies (EstimateJob's time range).
    ThroughputMeter::Pace pace;
  };

  virtual ~PromptCounter() = default;
  // Waits for the backend's detection, as a shard's first request does
  // (UNAVAILABLE once the backend has not answered for its outage limit).
  virtual absl::StatusOr<ServerShape> Shape(const v1::Block& block) = 0;
  // Each prompt's tokens as `block`'s backend counts them; only where Shape
  // says it has a tokenizer. Blocks until every count is in.
  virtual absl::StatusOr<std::vector<int64_t>> CountTokens(
      const v1::Block& block, const std::vector<std::string>& prompts) = 0;
};

// Asks the server's backends (which outlive it), each request within the
// backend's in-flight cap.
class BackendPromptCounter final : public PromptCounter {
 public:
  using Backends = absl::flat_hash_map<std::string, Backend*>;
  explicit BackendPromptCounter(Backends backends)
      : backends_(std::move(backends)) {}

  absl::StatusOr<ServerShape> Shape(const v1::Block& block) override;
  absl::StatusOr<std::vector<int64_t>> CountTokens(
      const v1::Block& block, const std::vector<std::string>& prompts) override;

 private:
  absl::StatusOr<Backend*> BackendFor(const v1::Block& block) const;

  const Backends backends_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_PROMPT_COUNTER_H_
