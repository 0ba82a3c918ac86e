// The jobs this server knows: running ones and, for a retention period,
// ended ones (for GetJob, ListJobs, WatchJob and CancelJob). A job that has
// ended and whose final record is in the store costs the registry a small
// entry (its id, tenant, state and end): its Job is built from the store
// each time it is read, and freed with its last reader. A job past its
// retention is no longer found or listed, and RemoveExpired (run on a
// period by the server, never inside a call) removes it from the store as
// well. No call walks every job: Find and Add cost the same with fifty
// thousand jobs stored as with none. A caller finds only the jobs it owns
// (caller.h): another tenant's job is NOT_FOUND, as if it did not exist.
// Find and ListPage may read the store: call them off gRPC's reactions,
// or with StoreReads::kRefused.
#ifndef SDG_SERVER_SERVICE_JOB_REGISTRY_H_
#define SDG_SERVER_SERVICE_JOB_REGISTRY_H_

#include <functional>
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

// Whether a call may read the store. A gRPC reaction asks with kRefused
// first: jobs in memory are answered at once, and a call that needs the
// store (an ended job is read back from it) gets StoreReadRefused and is
// asked again off the reaction, with kAllowed.
enum class StoreReads { kAllowed, kRefused };
absl::Status StoreReadRefused();
bool IsStoreReadRefused(const absl::Status& status);

class JobRegistry {
 public:
  // Builds the Job of an ended job from its stored record (for reading it:
  // its snapshot and its events). Called from any thread, concurrently.
  using LoadEnded =
      std::function<absl::StatusOr<std::shared_ptr<Job>>(JobRecord record)>;

  JobRegistry(absl::Duration retention, JobStore& store, LoadEnded load_ended)
      : retention_(retention),
        store_(store),
        load_ended_(std::move(load_ended)) {}

  // JobIdTaken if a listed job has the same id.
  absl::Status Add(std::shared_ptr<Job> job);
  // A job the store holds as ended, listed after those added before it.
  // JobIdTaken if a listed job has the same id.
  absl::Status AddEnded(const JobRecord& record);
  // NOT_FOUND naming the id, also when the job is not the caller's. For
  // admission, Find(id, Caller{.admin = true}) sees every job. Reads the
  // store for an ended job no one holds.
  absl::StatusOr<std::shared_ptr<Job>> Find(
      const std::string& job_id, const Caller& caller,
      StoreReads reads = StoreReads::kAllowed);
  // The jobs that have not ended (from Add only), oldest first.
  std::vector<std::shared_ptr<Job>> Unfinished();
  // Forgets a job (a job that was never admitted, or a deleted one).
  void Remove(const std::string& job_id);
  // Forgets the jobs that ended before `now` - retention and removes them
  // from the store; returns how many. Walks every job, outside the lock that
  // Find and Add take, and writes to the store after that lock is released.
  int RemoveExpired(absl::Time now);
  // Lets go of the Job of every job whose final record is in the store
  // (Job::IsStoredEnded): it is read from the store again when asked for.
  // Only for a store that keeps what it is given (durable, or in memory
  // for this process). Returns how many were let go.
  int ForgetEndedJobs();

  // Up to `size` of the caller's jobs in `state` (UNSPECIFIED: any), oldest
  // first, after the position `page_token` names ("" for the first page):
  // each the job in memory or, for an ended job, its stored record (read
  // for the page at once). The next page's token, or "" after the last.
  struct Listed {
    std::shared_ptr<Job> job;
    JobRecord ended;  // when `job` is null
    const std::string& job_id() const {
      return job != nullptr ? job->id() : ended.job_id;
    }
  };
  struct Page {
    std::vector<Listed> jobs;
    std::string next_page_token;
  };
  absl::StatusOr<Page> ListPage(const Caller& caller,
                                const std::string& page_token, int size,
                                v1::JobState state,
                                StoreReads reads = StoreReads::kAllowed);

 private:
  // A listed job: its Job while it runs (or until ForgetEndedJobs), else
  // what lists and finds it without one. (No weak_ptr to a Job read from
  // the store: it would keep the Job's memory, allocated with its control
  // block, for as long as the entry lives.)
  struct Entry {
    std::string job_id;
    std::string tenant;
    std::shared_ptr<Job> job;
    // Without `job`: the ended job's state and end.
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    absl::Time end_time = absl::InfinitePast();
  };

  absl::Status AddEntry(Entry entry);
  // Every entry, expired or not, oldest first, with its position.
  std::vector<std::pair<uint64_t, Entry>> All();
  // Ended, and ended before `now` - retention.
  bool Expired(const Entry& entry, absl::Time now) const;
  v1::JobState StateOf(const Entry& entry) const;
  // The entry's Job: its own, or the ended job's built from the store.
  absl::StatusOr<std::shared_ptr<Job>> JobOf(const Entry& entry,
                                             StoreReads reads);
  // What a page lists of each entry, the ended jobs' records read at once;
  // an ended job removed from the store since is left out.
  absl::StatusOr<std::vector<Listed>> ListedOf(
      const std::vector<Entry>& entries, StoreReads reads);
  // An ended job's Job from its stored record (load_ended_).
  absl::StatusOr<std::shared_ptr<Job>> Rebuild(JobRecord record);
  // INTERNAL: the store holds a job this server ended as unfinished.
  static absl::Status StoredUnfinished(const std::string& job_id);
  absl::Status NotFound(const std::string& job_id) const;

  const absl::Duration retention_;
  JobStore& store_;
  const LoadEnded load_ended_;
  absl::Mutex mu_;
  uint64_t next_position_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, uint64_t> positions_ ABSL_GUARDED_BY(mu_);
  // By position: the order jobs were added.
  absl::btree_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_JOB_REGISTRY_H_
