// Runs one shard of a job. BackendShardRunner is the real one: it renders the
// shard's prompts, sends them to the backend the job's block names (one
// request per row, or one per shard where the backend batches), waits for the
// replies or the job's cancellation, and turns them into result rows.
#ifndef SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
#define SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/cancellation_token.h"
#include "server/backend/backend.h"
#include "server/jobs/job_spec.h"
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

 private:
  // The shard's prompts: one per row, or why the row has none (a missing
  // column, over --max_prompt_bytes or past the shard's budget).
  struct Prompts {
    std::vector<std::string> texts;  // of the rows that have one
    std::vector<int64_t> rows;       // their offsets in the shard
    std::vector<RowFailure> failed;  // the others
  };
  // The shard's requests, before they are sent.
  struct Requests {
    absl::string_view path;
    std::vector<std::string> bodies;
    bool batched = false;  // one body holding every prompt of the shard
  };

  Prompts RenderPrompts(
      const JobSpec& spec, const ShardSpec& shard,
      const std::vector<google::protobuf::Struct>& rows) const;
  absl::StatusOr<Requests> BuildRequests(const JobSpec& spec,
                                         std::vector<std::string> prompts,
                                         Backend& backend,
                                         CancellationToken& token) const;
  // Sends every request and waits until each has its reply (cancelling
  // `token` aborts those in flight); replies in request order.
  std::vector<BackendReply> SendAndWait(Backend& backend,
                                        absl::string_view path,
                                        std::vector<std::string> bodies,
                                        CancellationToken& token) const;
  // Parses the replies into result rows. A failed request fails its rows:
  // the one row of an unbatched request, every prompted row of a batch.
  ShardOutcome BuildOutcome(const JobSpec& spec, const ShardSpec& shard,
                            std::vector<google::protobuf::Struct> rows,
                            Prompts prompts, const Requests& requests,
                            std::vector<BackendReply> replies,
                            CancellationToken& token) const;

  const Backends backends_;
  Metrics& metrics_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_SHARD_RUNNER_H_
