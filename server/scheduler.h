// Runs the shards of every job on a fixed set of persistent worker threads.
// Jobs are admitted up to a limit (more wait in a bounded queue); shards of
// running jobs are taken round-robin; each job has its own cap (num_workers)
// under the global one (the worker count). A cancelled job gets no new shard
// and its workers go back to the pool; a job whose caller reads slowly gets
// no new shard until its stream has room.
#ifndef SDG_SERVER_SCHEDULER_H_
#define SDG_SERVER_SCHEDULER_H_

#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/cancellation_token.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/shard_runner.h"

namespace sdg {

class Scheduler {
 public:
  struct Options {
    int max_workers = 64;      // shards in progress at once, all jobs
    int max_jobs = 16;         // jobs running at once
    int max_queued_jobs = 64;  // admitted jobs waiting to run
  };

  // Starts the workers; they live until the scheduler is destroyed.
  Scheduler(const Options& options, ShardRunner& runner, Metrics& metrics);
  // Cancels the jobs still admitted, waits for their shards, joins workers.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs the job now (it emits `started`) or queues it (QUEUED; `started`
  // comes when it runs). RESOURCE_EXHAUSTED when the queue is full too. Once
  // admitted, the scheduler calls job->MarkFinished() exactly once: after the
  // last shard, or once the job is cancelled and none of its shards runs.
  absl::Status Submit(std::shared_ptr<Job> job);

  int worker_count() const { return static_cast<int>(workers_.size()); }

 private:
  struct Entry {
    std::shared_ptr<Job> job;
    int64_t next_shard = 0;
    int in_progress = 0;
    bool stalled = false;  // skipped because its stream is full
    CancellationToken::Registration on_cancel = {};
  };
  using EntryList = std::list<Entry>;

  void WorkerLoop();
  void OnJobCancelled(Job* job);
  // Called when a job's stream has room again.
  void Wake();
  EntryList::iterator FindDispatchableLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a running entry and returns its job if nothing more will run for
  // it; then lets queued jobs take the free run slots.
  std::shared_ptr<Job> TakeIfDoneLocked(EntryList::iterator entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartLocked(Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  ShardRunner& runner_;
  Metrics& metrics_;

  absl::Mutex mu_;
  absl::CondVar work_available_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Round-robin order, least recently served first: a new job enters at the
  // front, a job that just got a shard moves to the back.
  EntryList running_ ABSL_GUARDED_BY(mu_);
  EntryList queued_ ABSL_GUARDED_BY(mu_);  // oldest first

  std::vector<std::thread> workers_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULER_H_
