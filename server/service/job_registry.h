// The jobs this server knows: running ones and, for a retention period,
// finished ones (for GetJob, ListJobs, WatchJob and CancelJob). A finished
// job past its retention is no longer found or listed, and RemoveExpired
// (run on a period by the server, never inside a call) removes it from the
// store as well. No call walks every job: Find and Add cost the same with
// fifty thousand jobs stored as with none. A caller finds only the jobs it
// owns (caller.h): another tenant's job is NOT_FOUND, as if it did
// not exist.
#ifndef SDG_SERVER_SERVICE_JOB_REGISTRY_H_
#define SDG_SERVER_SERVICE_JOB_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/jobs/job.h"
#include "server/service/caller.h"
#include "server/store/job_store.h"

namespace sdg {

// ALREADY_EXISTS for a job_id a listed job holds: the same words whoever
// holds it, so that another tenant learns nothing of the job.
absl::Status JobIdTaken(const std::string& job_id);

class JobRegistry {
 public:
  JobRegistry(absl::Duration retention, JobStore& store)
      : retention_(retention), store_(store) {}

  // JobIdTaken if a listed job has the same id.
  absl::Status Add(std::shared_ptr<Job> job);
  // NOT_FOUND naming the id, also when the job is not the caller's. For
  // admission, Find(id, Caller{.admin = true}) sees every job.
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& job_id,
                                            const Caller& caller);
  // Oldest first.
  std::vector<std::shared_ptr<Job>> List();
  std::vector<std::shared_ptr<Job>> Unfinished();
  // Forgets a job (a job that was never admitted, or a deleted one).
  void Remove(const std::string& job_id);
  // Forgets the jobs that finished before `now` - retention and removes them
  // from the store; returns how many. Walks every job, outside the lock that
  // Find and Add take, and writes to the store after that lock is released.
  int RemoveExpired(absl::Time now);

  // Up to `size` of the caller's jobs in `state` (UNSPECIFIED: any), oldest
  // first, after the position `page_token` names ("" for the first page).
  // The next page's token, or "" after the last.
  struct Page {
    std::vector<std::shared_ptr<Job>> jobs;
    std::string next_page_token;
  };
  absl::StatusOr<Page> ListPage(const Caller& caller,
                                const std::string& page_token, int size,
                                v1::JobState state);

 private:
  // Every job, expired or not, oldest first.
  std::vector<std::shared_ptr<Job>> All();
  // Finished, and finished before `now` - retention.
  bool Expired(const Job& job, absl::Time now) const;

  const absl::Duration retention_;
  JobStore& store_;
  absl::Mutex mu_;
  uint64_t next_position_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, uint64_t> positions_ ABSL_GUARDED_BY(mu_);
  // By position: the order jobs were added.
  absl::btree_map<uint64_t, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_JOB_REGISTRY_H_
