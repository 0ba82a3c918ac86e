// Runs the shards of every job on a fixed set of persistent worker threads.
// Shards of concurrent jobs are taken round-robin; each job has its own cap
// (num_workers) under the global one (the worker count). A cancelled job gets
// no new shard; its workers go back to the pool.
#ifndef SDG_SERVER_SCHEDULER_H_
#define SDG_SERVER_SCHEDULER_H_

#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/cancellation_token.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/shard_runner.h"

namespace sdg {

class Scheduler {
 public:
  struct Options {
    int max_workers = 64;
  };

  // Starts the workers; they live until the scheduler is destroyed.
  Scheduler(const Options& options, ShardRunner& runner, Metrics& metrics);
  // Cancels the jobs still running, waits for their shards, joins workers.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Marks the job running and queues its shards. The scheduler calls
  // job->MarkFinished() once the last shard has ended, or once the job is
  // cancelled and none of its shards is running.
  void Submit(std::shared_ptr<Job> job);

  int worker_count() const { return static_cast<int>(workers_.size()); }

 private:
  struct Entry {
    std::shared_ptr<Job> job;
    int64_t next_shard = 0;
    int running = 0;
    CancellationToken::Registration on_cancel;
  };
  using EntryList = std::list<Entry>;

  void WorkerLoop();
  void OnJobCancelled(Job* job);
  // Removes `entry` and returns its job if nothing more will run for it.
  std::shared_ptr<Job> TakeIfDoneLocked(EntryList::iterator entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  EntryList::iterator FindDispatchableLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ShardRunner& runner_;
  Metrics& metrics_;

  absl::Mutex mu_;
  absl::CondVar work_available_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Round-robin order: a job that just got a shard moves to the back.
  EntryList entries_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> workers_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULER_H_
