// Runs one shard of a job. BackendShardRunner is the real one: it renders the
// shard's prompts, sends them to the backend the job's block (or a pipeline
// step) names, one request per row or one per shard where the backend
// batches, and turns the replies into result rows. Blocks and pipeline
// stages take the same path: no shard holds a thread while its requests are
// in flight. Start sends the first requests and returns; the last reply
// hands the shard back to the scheduler's workers (`ready`), where it parses
// the replies and either ends with its outcome or, for a stage with a later
// LLM step, runs the steps up to it and sends that step's requests.
#ifndef SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
#define SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "base/cancellation_token.h"
#include "server/backend/backend.h"
#include "server/backend/openai_protocol.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/shard_input.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/observability/metrics.h"

namespace sdg {

class ShardRunner {
 public:
  // Takes a started shard further on a scheduler worker once the replies it
  // waited for are in, without waiting on the network: its outcome, or
  // nullopt when it has sent the requests of a later step (it is handed
  // back through `ready` again once they are answered).
  using Continuation = absl::AnyInvocable<std::optional<ShardOutcome>() &&>;
  // Hands a started shard to the scheduler's workers: called from any
  // thread (the HTTP loop's on a last reply, or the worker's inside Start),
  // once per continuation, until a continuation returns the outcome.
  using Ready = absl::AnyInvocable<void(Continuation)>;

  virtual ~ShardRunner() = default;
  // Starts a shard on a scheduler worker and returns without waiting for
  // the backend. Once `token` is cancelled the shard's requests stop at
  // once, and its outcome is the token's reason. For a pipeline's stage the
  // outcome's rows are the stage's output and failed_steps the rows that
  // failed at a step.
  virtual void Start(const JobSpec& spec, const ShardSpec& shard,
                     ShardInput input, CancellationToken& token,
                     Ready ready) = 0;
};

// A runner whose shards run start to end on the worker that continues
// them: for tests and benchmarks that stand in for the backend.
class BlockingShardRunner : public ShardRunner {
 public:
  // Runs on a scheduler worker and may block it; must return promptly once
  // `token` is cancelled.
  virtual ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                           ShardInput input, CancellationToken& token) = 0;
  void Start(const JobSpec& spec, const ShardSpec& shard, ShardInput input,
             CancellationToken& token, Ready ready) final {
    ready([this, &spec, shard, input = std::move(input), &token]() mutable {
      return std::optional<ShardOutcome>(
          Run(spec, shard, std::move(input), token));
    });
  }
};

class BackendShardRunner final : public ShardRunner {
 public:
  // The server's backends by name (they outlive the runner).
  using Backends = absl::flat_hash_map<std::string, Backend*>;

  BackendShardRunner(Backends backends, Metrics& metrics)
      : backends_(std::move(backends)), metrics_(metrics) {}

  void Start(const JobSpec& spec, const ShardSpec& shard, ShardInput input,
             CancellationToken& token, Ready ready) override;

 private:
  // What a prompt's request gave: its n choices, or why it has none.
  struct Generations {
    std::vector<absl::StatusOr<std::vector<Choice>>> choices;  // per prompt
    std::vector<int> attempts;                                 // per prompt
    v1::TokenUsage usage;
  };
  // A call's requests, before they are sent.
  struct Requests {
    absl::string_view path;
    std::vector<std::string> bodies;
    bool batched = false;  // one body holding every prompt of the shard
  };
  // A shard's requests in flight and their replies (shard_runner.cc).
  class RequestBatch;
  // One LLM call of a shard: a block's, or one LLM step's of a stage.
  struct Call {
    Backend* backend = nullptr;
    Requests requests;  // their bodies moved into `batch` by SendCall
    size_t prompt_count = 0;
    int samples = 1;  // the n of every body
    std::shared_ptr<RequestBatch> batch;
  };
  // A block's shard, and a pipeline stage's, from Start to their outcome
  // (shard_runner.cc).
  template <typename Shard>
  class RowsShard;  // what BlockShard and BatchShard share
  class BlockShard;
  class StageShard;
  class BatchShard;

  absl::StatusOr<Backend*> BackendFor(const v1::Block& block) const;
  // The backend that lists `model` in its /v1/models, `fallback` first; else
  // `fallback` (an OpenAI batch line's backend).
  Backend* BackendForModel(const std::string& fallback,
                           const std::string& model) const;
  // The requests for `prompts` with `block` (one each, or one for all where
  // the backend batches), not yet sent; `on_replied` runs once, on any
  // thread, when the last reply is in. Waits only for the backend's first
  // batching decision.
  absl::StatusOr<Call> PrepareCall(
      const v1::Block& block, const std::vector<std::string>& prompts,
      CancellationToken& token, absl::AnyInvocable<void() &&> on_replied) const;
  // Sends `call`, which the caller has stored where its continuation reads
  // it: every reply may come, and the continuation run on another worker,
  // before this returns. Cancelling `token` aborts the requests in flight.
  static void SendCall(Call& call, CancellationToken& token);
  // What the call's replies gave, once `on_replied` has run; the token's
  // reason instead when the job was stopped (not its aborted requests').
  // The replies' tokens are counted for `tenant` (the job's).
  absl::StatusOr<Generations> CollectCall(const v1::Block& block,
                                          const std::string& tenant, Call& call,
                                          CancellationToken& token) const;
  // What the replies to `requests` (for `prompt_count` prompts) gave.
  Generations ReadReplies(const v1::Block& block, const std::string& tenant,
                          const Requests& requests, size_t prompt_count,
                          std::vector<BackendReply> replies) const;

  const Backends backends_;
  Metrics& metrics_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
