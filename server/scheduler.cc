#include "server/scheduler.h"

#include "absl/time/clock.h"

namespace sdg {

Scheduler::Scheduler(const Options& options, ShardRunner& runner,
                     Metrics& metrics)
    : runner_(runner), metrics_(metrics) {
  workers_.reserve(options.max_workers);
  for (int i = 0; i < options.max_workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

Scheduler::~Scheduler() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (Entry& entry : entries_) jobs.push_back(entry.job);
  }
  for (auto& job : jobs) {
    job->Cancel(absl::CancelledError("server is shutting down"));
  }
  {
    absl::MutexLock lock(&mu_);
    // Workers finish the shards they hold; cancelled jobs start no more.
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return entries_.empty();
    };
    mu_.Await(absl::Condition(&idle));
    stopping_ = true;
  }
  work_available_.SignalAll();
  for (std::thread& worker : workers_) worker.join();
}

void Scheduler::Submit(std::shared_ptr<Job> job) {
  job->MarkRunning();
  Job* raw = job.get();
  {
    absl::MutexLock lock(&mu_);
    entries_.push_back(Entry{std::move(job)});
    metrics_.ShardsQueued(static_cast<double>(raw->plan().shard_count()));
  }
  // Registered outside mu_: the callback runs at once if already cancelled.
  CancellationToken::Registration registration =
      raw->token().OnCancel([this, raw] { OnJobCancelled(raw); });
  {
    absl::MutexLock lock(&mu_);
    for (Entry& entry : entries_) {
      if (entry.job.get() == raw) {
        entry.on_cancel = std::move(registration);
        break;
      }
    }
  }
  // If the entry was already finished and removed, `registration` dies here
  // and unregisters.
  work_available_.SignalAll();
}

Scheduler::EntryList::iterator Scheduler::FindDispatchableLocked() {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    Job& job = *it->job;
    if (it->next_shard < job.plan().shard_count() &&
        it->running < job.spec().num_workers && !job.token().IsCancelled()) {
      return it;
    }
  }
  return entries_.end();
}

std::shared_ptr<Job> Scheduler::TakeIfDoneLocked(EntryList::iterator entry) {
  if (entry->running > 0) return nullptr;
  const int64_t unstarted =
      entry->job->plan().shard_count() - entry->next_shard;
  if (unstarted > 0 && !entry->job->token().IsCancelled()) return nullptr;
  metrics_.ShardsQueued(-static_cast<double>(unstarted));
  std::shared_ptr<Job> job = std::move(entry->job);
  // Destroying the registration here is safe even inside the job's cancel
  // callback (same thread), see CancellationToken::Registration.
  entries_.erase(entry);
  return job;
}

void Scheduler::OnJobCancelled(Job* job) {
  std::shared_ptr<Job> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->job.get() == job) {
        done = TakeIfDoneLocked(it);
        break;
      }
    }
  }
  if (done) done->MarkFinished();
}

void Scheduler::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    ShardSpec shard;
    {
      absl::MutexLock lock(&mu_);
      EntryList::iterator entry;
      while (!stopping_ &&
             (entry = FindDispatchableLocked()) == entries_.end()) {
        work_available_.Wait(&mu_);
      }
      if (stopping_) return;
      job = entry->job;
      shard = job->plan().Shard(entry->next_shard++);
      ++entry->running;
      entries_.splice(entries_.end(), entries_, entry);
    }
    metrics_.ShardsQueued(-1);
    metrics_.WorkerBusy(1);
    absl::Time start = absl::Now();
    ShardOutcome outcome = runner_.Run(job->spec(), shard, job->token());
    job->ReportShard(shard, std::move(outcome), absl::Now() - start);
    metrics_.WorkerBusy(-1);

    std::shared_ptr<Job> done;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->job == job) {
          --it->running;
          done = TakeIfDoneLocked(it);
          break;
        }
      }
    }
    if (done) done->MarkFinished();
  }
}

}  // namespace sdg
