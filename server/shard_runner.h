// Runs one shard of a job. BackendShardRunner is the real one: it renders the
// shard's prompts, sends them to the job's backend (one request per row, or
// one per shard where the backend batches), waits for the replies or the
// job's cancellation, and turns them into result rows.
#ifndef SDG_SERVER_SHARD_RUNNER_H_
#define SDG_SERVER_SHARD_RUNNER_H_

#include <vector>

#include "absl/status/status.h"
#include "sdg/v1/generation.pb.h"
#include "server/cancellation_token.h"
#include "server/job_spec.h"
#include "server/metrics.h"
#include "server/shard_plan.h"

namespace sdg {

struct ShardOutcome {
  // OK, or why the shard failed (CANCELLED when the job was cancelled).
  absl::Status status;
  // HTTP attempts of the request that failed.
  int attempts = 0;
  // row_count * n rows, in (row_index, sample_index) order, when OK.
  std::vector<v1::ResultRow> rows;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

class ShardRunner {
 public:
  virtual ~ShardRunner() = default;
  // Runs on a scheduler worker and may block it; must return promptly once
  // `token` is cancelled.
  virtual ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                           CancellationToken& token) = 0;
};

class BackendShardRunner final : public ShardRunner {
 public:
  explicit BackendShardRunner(Metrics& metrics) : metrics_(metrics) {}

  // Blocks the calling worker until every request of the shard has ended;
  // cancelling `token` aborts them at once.
  ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                   CancellationToken& token) override;

 private:
  Metrics& metrics_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SHARD_RUNNER_H_
