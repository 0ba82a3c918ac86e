// Runs one shard of a job. BackendShardRunner is the real one: it renders the
// shard's prompts, sends them to the backend the job's block names (one
// request per row, or one per shard where the backend batches), waits for the
// replies or the job's cancellation, and turns them into result rows. For a
// pipeline it runs the shard's rows through every step of their stage, the
// LLM steps through the same path.
#ifndef SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
#define SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/cancellation_token.h"
#include "server/backend/backend.h"
#include "server/backend/openai_protocol.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/pipeline_rows.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/observability/metrics.h"

namespace sdg {

class ShardRunner {
 public:
  virtual ~ShardRunner() = default;
  // Runs on a scheduler worker and may block it; must return promptly once
  // `token` is cancelled. `rows` are the shard's rows, read from the job's
  // dataset.
  virtual ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                           std::vector<google::protobuf::Struct> rows,
                           CancellationToken& token) = 0;
  // A pipeline's shard: `rows` through the steps of `stage` (the outcome's
  // rows are the stage's output; failed_steps the rows that failed).
  virtual ShardOutcome RunStage(const JobSpec& spec, const ShardSpec& shard,
                                int stage, std::vector<PipelineRow> rows,
                                CancellationToken& token) = 0;
};

class BackendShardRunner final : public ShardRunner {
 public:
  // The server's backends by name (they outlive the runner).
  using Backends = absl::flat_hash_map<std::string, Backend*>;

  BackendShardRunner(Backends backends, Metrics& metrics)
      : backends_(std::move(backends)), metrics_(metrics) {}

  // Blocks the calling worker until every request of the shard has ended;
  // cancelling `token` aborts them at once.
  ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                   std::vector<google::protobuf::Struct> rows,
                   CancellationToken& token) override;
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
  // Sends every request and waits until each has its reply (cancelling
  // `token` aborts those in flight); replies in request order.
  std::vector<BackendReply> SendAndWait(Backend& backend,
                                        absl::string_view path,
                                        std::vector<std::string> bodies,
                                        CancellationToken& token) const;
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
