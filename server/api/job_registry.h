// The jobs this server knows: running ones and, for a retention period,
// finished ones (for GetJob, ListJobs and CancelJob).
#ifndef SDG_SERVER_API_JOB_REGISTRY_H_
#define SDG_SERVER_API_JOB_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/jobs/job.h"

namespace sdg {

class JobRegistry {
 public:
  explicit JobRegistry(absl::Duration retention) : retention_(retention) {}

  // ALREADY_EXISTS if a listed job has the same id.
  absl::Status Add(std::shared_ptr<Job> job);
  // NOT_FOUND naming the id.
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& job_id);
  // Oldest first.
  std::vector<std::shared_ptr<Job>> List();
  std::vector<std::shared_ptr<Job>> Unfinished();
  // Forgets a job that was never admitted.
  void Remove(const std::string& job_id);

 private:
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration retention_;
  absl::Mutex mu_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  struct Listed {
    uint64_t sequence;
    std::shared_ptr<Job> job;
  };
  absl::flat_hash_map<std::string, Listed> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_API_JOB_REGISTRY_H_
