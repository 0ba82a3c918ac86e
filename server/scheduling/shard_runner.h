// Runs one shard of a job. BackendShardRunner is the real one: it renders the
// shard's prompts, sends them to the backend the job's block names (one
// request per row, or one per shard where the backend batches) and turns the
// replies into result rows. A block's shard holds no thread while its
// requests are in flight: Start returns once they are sent, and the last
// reply hands the rest (parsing, building rows) back to the scheduler's
// workers. A pipeline's shard runs its stage's steps on the worker, the LLM
// steps through the same requests, waiting for their replies.
#ifndef SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
#define SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "base/cancellation_token.h"
#include "server/backend/backend.h"
#include "server/backend/openai_protocol.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/observability/metrics.h"
#include "server/pipeline/pipeline_rows.h"

namespace sdg {

class ShardRunner {
 public:
  // Makes a started shard's outcome; run on a scheduler worker. It does not
  // wait on the network: the shard's replies are in by then.
  using Finish = absl::AnyInvocable<ShardOutcome() &&>;
  // Called once per started shard, from any thread (the HTTP loop's, or the
  // worker's inside Start), when the shard is ready to finish.
  using Resume = absl::AnyInvocable<void(Finish) &&>;

  virtual ~ShardRunner() = default;
  // Starts a block's shard on a scheduler worker and returns without waiting
  // for the backend; calls `resume` exactly once. Once `token` is cancelled
  // the shard's requests stop at once, and its outcome is the token's
  // reason. `rows` are the shard's rows, read from the job's dataset.
  virtual void Start(const JobSpec& spec, const ShardSpec& shard,
                     std::vector<google::protobuf::Struct> rows,
                     CancellationToken& token, Resume resume) = 0;
  // A pipeline's shard: `rows` through the steps of `stage` (the outcome's
  // rows are the stage's output; failed_steps the rows that failed). Runs on
  // a scheduler worker and may block it; must return promptly once `token`
  // is cancelled.
  virtual ShardOutcome RunStage(const JobSpec& spec, const ShardSpec& shard,
                                int stage, std::vector<PipelineRow> rows,
                                CancellationToken& token) = 0;
};

// A runner whose block shards run start to end on the worker that finishes
// them: for tests and benchmarks that stand in for the backend.
class BlockingShardRunner : public ShardRunner {
 public:
  // Runs on a scheduler worker and may block it; must return promptly once
  // `token` is cancelled.
  virtual ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                           std::vector<google::protobuf::Struct> rows,
                           CancellationToken& token) = 0;
  void Start(const JobSpec& spec, const ShardSpec& shard,
             std::vector<google::protobuf::Struct> rows,
             CancellationToken& token, Resume resume) final {
    std::move(resume)(
        [this, &spec, shard, rows = std::move(rows), &token]() mutable {
          return Run(spec, shard, std::move(rows), token);
        });
  }
};

class BackendShardRunner final : public ShardRunner {
 public:
  // The server's backends by name (they outlive the runner).
  using Backends = absl::flat_hash_map<std::string, Backend*>;

  BackendShardRunner(Backends backends, Metrics& metrics)
      : backends_(std::move(backends)), metrics_(metrics) {}

  void Start(const JobSpec& spec, const ShardSpec& shard,
             std::vector<google::protobuf::Struct> rows,
             CancellationToken& token, Resume resume) override;
  ShardOutcome RunStage(const JobSpec& spec, const ShardSpec& shard, int stage,
                        std::vector<PipelineRow> rows,
                        CancellationToken& token) override;

 private:
  // What a prompt's request gave: its n choices, or why it has none.
  struct Generations {
    std::vector<absl::StatusOr<std::vector<Choice>>> choices;  // per prompt
    std::vector<int> attempts;                                 // per prompt
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
  };
  // The shard's requests, before they are sent.
  struct Requests {
    absl::string_view path;
    std::vector<std::string> bodies;
    bool batched = false;  // one body holding every prompt of the shard
  };

  // A block's shard from Start to its Finish (shard_runner.cc).
  class InFlight;
  // A block shard's prompts, rendered: the rows that have one, and the rows
  // that failed to render.
  struct Prompts {
    std::vector<std::string> texts;
    std::vector<size_t> prompted;  // their rows, by offset in the shard
    std::vector<RowFailure> failed_rows;
  };

  absl::StatusOr<Backend*> BackendFor(const v1::Block& block) const;
  // Sends `prompts` with `block` (one request each, or one for all where the
  // backend batches) and waits for every reply. Fails as a whole only when
  // the job is stopped.
  absl::StatusOr<Generations> Generate(const v1::Block& block,
                                       std::vector<std::string> prompts,
                                       CancellationToken& token) const;
  absl::StatusOr<Requests> BuildRequests(const v1::Block& block,
                                         std::vector<std::string> prompts,
                                         Backend& backend,
                                         CancellationToken& token) const;
  // Sends every request (each for `samples` choices per prompt) and waits
  // until each has its reply (cancelling `token` aborts those in flight);
  // replies in request order.
  std::vector<BackendReply> SendAndWait(Backend& backend,
                                        absl::string_view path,
                                        std::vector<std::string> bodies,
                                        int samples,
                                        CancellationToken& token) const;
  // What the replies to `requests` (for `prompt_count` prompts) gave.
  Generations ReadReplies(const v1::Block& block, const Requests& requests,
                          size_t prompt_count,
                          std::vector<BackendReply> replies) const;
  // A block shard's result rows from its generations.
  static ShardOutcome BlockOutcome(const JobSpec& spec, const ShardSpec& shard,
                                   std::vector<google::protobuf::Struct> rows,
                                   Prompts prompts, Generations generations);
  // One LLM step of a pipeline over `rows`.
  absl::StatusOr<StepOutput> RunLlmStep(const JobSpec& spec,
                                        const StepSpec& step,
                                        std::vector<PipelineRow> rows,
                                        ShardOutcome& outcome,
                                        CancellationToken& token) const;

  const Backends backends_;
  Metrics& metrics_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
