// Runs the shards of every job on a fixed set of persistent worker threads,
// at most max_workers shards in progress at once. A shard (a block's or a
// pipeline stage's) holds no worker while its requests are in flight: the
// worker starts it and goes on to other work, and the shard comes back to the
// workers (a queue served before new shards) to be finished once its replies
// are in, so that under load a worker finishes shard after shard without
// sleeping in between. A pipeline stage's shard, reported, waits for its
// events' commit before its rows go on to the next stage; it holds no worker
// and no place in max_workers meanwhile, only its place in its job (the
// commit hands it back to the workers, as replies do). Jobs are admitted up to
// a limit (more wait in a bounded queue), and each tenant up to its own; shards
// are taken round-robin across tenants first, then across a tenant's running
// jobs, so that one tenant's many jobs do not starve another's one; each job
// has its own cap (num_workers) under the global one (the worker count). A
// queued job starts when a run slot frees, the tenant with the fewest running
// jobs first. A cancelled job gets no new shard and its workers go back to the
// pool. A resumed job runs only the shards its log has not committed. A job
// with a timeout is stopped (DEADLINE_EXCEEDED) by a timer armed when it starts
// to run. Jobs do not wait for their watchers: events go to the job's log,
// which watchers read at their own pace.
#ifndef SDG_SERVER_SCHEDULING_SCHEDULER_H_
#define SDG_SERVER_SCHEDULING_SCHEDULER_H_

#include <algorithm>
#include <deque>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/cancellation_token.h"
#include "base/timer_service.h"
#include "server/jobs/job.h"
#include "server/observability/metrics.h"
#include "server/scheduling/job_timeout.h"
#include "server/scheduling/shard_runner.h"

namespace sdg {

class Scheduler {
 public:
  struct Options {
    // Worker threads, and shards in progress at once, all jobs.
    int max_workers = 64;
    int max_jobs = 16;         // jobs running at once
    int max_queued_jobs = 64;  // admitted jobs waiting to run
    // The same, per tenant (Job::tenant()).
    int tenant_max_jobs = 16;
    int tenant_max_queued_jobs = 64;
    // The prompt tokens (JobSpec::enqueued_tokens) of a tenant's queued and
    // running jobs together; 0: no limit.
    int64_t tenant_max_enqueued_tokens = 0;
  };

  // Starts the workers; they live until the scheduler is destroyed. Job
  // timeouts run on `timers`.
  Scheduler(const Options& options, ShardRunner& runner, TimerService& timers,
            Metrics& metrics);
  // Cancels the jobs still admitted, waits for their shards, joins workers.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs the job now (it emits `started`) or queues it (QUEUED; `started`
  // comes when it runs). RESOURCE_EXHAUSTED when the queue is full too, or
  // the job's tenant has as many jobs queued as it may, or its jobs' prompt
  // tokens would pass the tenant's enqueued-token limit; the message names
  // the limit, its flags and what is left. A job resumed from the store was
  // admitted once: kResumed queues it past every queue limit (a restart with
  // lower limits or a smaller tokens file must not drop it). Once admitted, the
  // scheduler calls job->MarkFinished() exactly once: after the last shard, or
  // once the job is cancelled and none of its shards runs.
  enum class Admission { kNew, kResumed };
  absl::Status Submit(std::shared_ptr<Job> job,
                      Admission admission = Admission::kNew);
  // Whether jobs need their JobSpec::enqueued_tokens counted.
  bool limits_enqueued_tokens() const {
    return options_.tenant_max_enqueued_tokens > 0;
  }

  int worker_count() const { return static_cast<int>(workers_.size()); }

 private:
  struct Entry {
    std::shared_ptr<Job> job;
    int64_t started = 0;  // shards handed to workers
    // Job::shards_to_run() when last looked at (a pipeline's grow as its
    // shards count), for the shards_queued gauge.
    int64_t shards_known = 0;
    // Started and not yet counted by the job (num_workers caps it).
    int in_progress = 0;
    CancellationToken::Registration on_cancel = {};
    JobTimeout timeout = {};  // armed when the job starts to run
    // Its tenant's slot in tenant_served_, set when it starts to run: the
    // dispatch reads and bumps it without a lookup.
    uint64_t* tenant_served = nullptr;
  };
  using EntryList = std::list<Entry>;
  // Jobs started under mu_ (Job::MarkRunning) whose records are saved once
  // it is released: no store write runs under the lock every worker needs.
  using StartedJobs = std::vector<std::shared_ptr<Job>>;
  // A job that has nothing more to run, taken out of the lists under mu_
  // and finished outside it, with the queued jobs its run slot started. It
  // carries the job's cancel registration: the registration's end waits for
  // a cancel callback running on another thread, and that callback takes
  // mu_ (OnJobCancelled), so it must not end under mu_. Declared after
  // `job`, whose token it points into.
  struct Ended {
    std::shared_ptr<Job> job;
    JobTimeout timeout = {};  // disarmed outside mu_ too: its callback takes it
    CancellationToken::Registration on_cancel = {};
    StartedJobs started;
  };

  // A started shard whose replies are in, to be continued on a worker; or
  // (no continuation) a pipeline's shard whose events are committed, whose
  // place a worker frees.
  struct Ready {
    std::shared_ptr<Job> job;
    ShardSpec shard;
    absl::Time started;
    ShardRunner::Continuation continuation;
  };

  void WorkerLoop();
  // Reads the shard's input and starts it; it comes back through ready_.
  void StartShard(std::shared_ptr<Job> job, const ShardSpec& shard);
  // The runner's Ready: queues a shard's continuation for a worker.
  void QueueReady(Ready ready);
  // Reports the shard's outcome to its job, and frees its place once the
  // job has counted it.
  void EndShard(const std::shared_ptr<Job>& job, const ShardSpec& shard,
                ShardOutcome outcome, absl::Time started);
  // A shard the job has counted: frees its place in the job (and in
  // max_workers, if it still holds one there), queues the shards it
  // released, and finishes the job if nothing more will run for it.
  void FreeShardPlace(const std::shared_ptr<Job>& job, bool holds_worker_place);
  void OnJobCancelled(Job* job);
  // The running job to take a shard from: of the tenant served least
  // recently, its job served least recently.
  EntryList::iterator FindDispatchableLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static int CountTenant(const EntryList& list, const std::string& tenant);
  // OK, or why `job` (new) would pass its tenant's enqueued-token limit.
  absl::Status CheckEnqueuedTokensLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The prompt tokens `tenant`'s queued and running jobs hold, and the
  // gauge of them, set when a job is admitted or leaves (with the limit).
  int64_t EnqueuedTokensLocked(const std::string& tenant) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportEnqueuedTokensLocked(const std::string& tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's entry, running or queued; null once it has ended.
  Entry* FindEntryLocked(const Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a running entry and returns its job if nothing more will run for
  // it; then lets queued jobs take the free run slots.
  Ended TakeIfDoneLocked(EntryList::iterator entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Outside mu_: the timeout's callback takes it, CancelTimer waits for a
  // running callback, and the store writes the records.
  void Finish(Ended ended) ABSL_LOCKS_EXCLUDED(mu_);
  static void SaveRecords(const StartedJobs& started) ABSL_LOCKS_EXCLUDED(mu_);
  // Marks the job running (its `started` event comes before any worker can
  // see it) and adds it to `started`, whose records the caller saves.
  void StartLocked(Entry entry, StartedJobs& started)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteQueuedLocked(StartedJobs& started)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  ShardRunner& runner_;
  TimerService& timers_;
  Metrics& metrics_;

  // Taken before any job's own lock (FindDispatchableLocked reads the jobs
  // under it); no store write or fsync runs under it.
  absl::Mutex mu_;
  absl::CondVar work_available_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Round-robin order, least recently served first: a new job enters at the
  // front, a job that just got a shard moves to the back.
  EntryList running_ ABSL_GUARDED_BY(mu_);
  EntryList queued_ ABSL_GUARDED_BY(mu_);  // oldest first
  // When each tenant with running jobs last got a shard (a dispatch count;
  // 0: not yet, which comes first). Node-based: entries point into it.
  absl::node_hash_map<std::string, uint64_t> tenant_served_
      ABSL_GUARDED_BY(mu_);
  uint64_t dispatches_ ABSL_GUARDED_BY(mu_) = 0;
  int shards_in_progress_ ABSL_GUARDED_BY(mu_) = 0;  // at most max_workers
  // Workers that will look at ready_ before they next wait: not waiting,
  // and not starting a shard (which may block).
  int serving_ ABSL_GUARDED_BY(mu_) = 0;
  // How many serving workers QueueReady keeps awake: the CPUs (at least 2).
  const int serving_target_ =
      static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  // Started shards ready to continue, oldest first; served before new
  // shards.
  std::deque<Ready> ready_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> workers_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_SCHEDULER_H_
