#include "server/scheduling/scheduler.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sdg {

Scheduler::Scheduler(const Options& options, ShardRunner& runner,
                     TimerService& timers, Metrics& metrics)
    : options_(options), runner_(runner), timers_(timers), metrics_(metrics) {
  workers_.reserve(options.max_workers);
  for (int i = 0; i < options.max_workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
    // Named here, so the name is set before the constructor returns.
    pthread_setname_np(workers_.back().native_handle(), "sdg-worker");
  }
}

Scheduler::~Scheduler() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (EntryList* list : {&running_, &queued_}) {
      for (Entry& entry : *list) jobs.push_back(entry.job);
    }
  }
  for (auto& job : jobs) {
    job->Cancel(absl::CancelledError("server is shutting down"));
  }
  {
    absl::MutexLock lock(&mu_);
    // Workers finish the shards they hold; cancelled jobs start no more.
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return running_.empty() && queued_.empty();
    };
    mu_.Await(absl::Condition(&idle));
    stopping_ = true;
  }
  work_available_.SignalAll();
  for (std::thread& worker : workers_) worker.join();
}

absl::Status Scheduler::Submit(std::shared_ptr<Job> job, Admission admission) {
  // Keeps the job (and the token the registration below points into) alive
  // until the registration is settled: once the job is listed, a worker may
  // finish it and drop its own reference at any moment. Declared before the
  // registration, so destroyed after it.
  const std::shared_ptr<Job> keep_alive = job;
  if (job->shards_to_run() == 0) {
    // Resumed after every shard was committed: it only has to finish.
    job->MarkRunning();
    job->MarkFinished();
    return absl::OkStatus();
  }
  Job* raw = job.get();
  const std::string& tenant = raw->tenant();
  StartedJobs started;
  {
    absl::MutexLock lock(&mu_);
    if (admission == Admission::kNew) {
      if (absl::Status s = CheckEnqueuedTokensLocked(*raw); !s.ok()) return s;
    }
    if (static_cast<int>(running_.size()) < options_.max_jobs &&
        CountTenant(running_, tenant) < options_.tenant_max_jobs) {
      StartLocked(Entry{std::move(job)}, started);
    } else if (admission == Admission::kNew &&
               static_cast<int>(queued_.size()) >= options_.max_queued_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "server is at its limit of ", options_.max_jobs, " running and ",
          options_.max_queued_jobs,
          " queued jobs (--max_jobs, --max_queued_jobs); retry later"));
    } else if (admission == Admission::kNew &&
               CountTenant(queued_, tenant) >=
                   options_.tenant_max_queued_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant \"", tenant, "\" is at its limit of ",
          options_.tenant_max_jobs, " running and ",
          options_.tenant_max_queued_jobs,
          " queued jobs (--tenant_max_jobs, --tenant_max_queued_jobs); wait "
          "for one to finish, or cancel one"));
    } else {
      queued_.push_back(Entry{std::move(job)});
      metrics_.JobsQueued(static_cast<double>(queued_.size()));
    }
    ReportEnqueuedTokensLocked(tenant);
  }
  SaveRecords(started);
  // Registered outside mu_: the callback runs at once if already cancelled.
  CancellationToken::Registration registration =
      raw->token().OnCancel([this, raw] { OnJobCancelled(raw); });
  {
    absl::MutexLock lock(&mu_);
    if (Entry* entry = FindEntryLocked(raw)) {
      entry->on_cancel = std::move(registration);
    }
  }
  // If the job already ended, `registration` dies here and unregisters.
  work_available_.SignalAll();
  return absl::OkStatus();
}

void Scheduler::StartLocked(Entry entry, StartedJobs& started) {
  entry.job->MarkRunning();
  started.push_back(entry.job);
  entry.tenant_served = &tenant_served_[entry.job->tenant()];
  entry.timeout = JobTimeout(timers_, entry.job);
  entry.shards_known = entry.job->shards_to_run();
  metrics_.ShardsQueued(static_cast<double>(entry.shards_known));
  // Least recently served first: a new job has not been served at all.
  running_.push_front(std::move(entry));
}

void Scheduler::SaveRecords(const StartedJobs& started) {
  for (const std::shared_ptr<Job>& job : started) job->SaveRecord();
}

void Scheduler::Finish(Ended ended) {
  SaveRecords(ended.started);
  if (ended.job == nullptr) return;
  ended.timeout = JobTimeout();  // disarmed before the job ends
  ended.job->MarkFinished();
}

Scheduler::Entry* Scheduler::FindEntryLocked(const Job* job) {
  for (EntryList* list : {&running_, &queued_}) {
    for (Entry& entry : *list) {
      if (entry.job.get() == job) return &entry;
    }
  }
  return nullptr;
}

int Scheduler::CountTenant(const EntryList& list, const std::string& tenant) {
  int count = 0;
  for (const Entry& entry : list) count += entry.job->tenant() == tenant;
  return count;
}

absl::Status Scheduler::CheckEnqueuedTokensLocked(const Job& job) const {
  const int64_t limit = options_.tenant_max_enqueued_tokens;
  if (limit <= 0) return absl::OkStatus();
  const int64_t enqueued = EnqueuedTokensLocked(job.tenant());
  const int64_t tokens = job.spec().enqueued_tokens;
  if (enqueued + tokens <= limit) return absl::OkStatus();
  const std::string tenant = absl::StrCat("tenant \"", job.tenant(), "\"");
  if (tokens > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job's prompts are about ", tokens, " tokens, more than ", tenant,
        "'s limit of ", limit,
        " enqueued prompt tokens (--tenant_max_enqueued_tokens); split the "
        "dataset"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      tenant, "'s queued and running jobs hold ", enqueued, " of its limit of ",
      limit, " enqueued prompt tokens (--tenant_max_enqueued_tokens), ",
      limit - enqueued, " left, and the job's prompts are about ", tokens,
      "; wait for a job to finish, or cancel one"));
}

int64_t Scheduler::EnqueuedTokensLocked(const std::string& tenant) const {
  int64_t enqueued = 0;
  for (const EntryList* list : {&running_, &queued_}) {
    for (const Entry& entry : *list) {
      if (entry.job->tenant() == tenant) {
        enqueued += entry.job->spec().enqueued_tokens;
      }
    }
  }
  return enqueued;
}

void Scheduler::ReportEnqueuedTokensLocked(const std::string& tenant) {
  if (!limits_enqueued_tokens()) return;
  metrics_.TenantEnqueuedTokens(tenant, EnqueuedTokensLocked(tenant));
}

void Scheduler::PromoteQueuedLocked(StartedJobs& started) {
  bool promoted = false;
  while (static_cast<int>(running_.size()) < options_.max_jobs) {
    // The oldest job of the tenant running fewest, among tenants below
    // their own limit.
    auto next = queued_.end();
    int next_running = options_.tenant_max_jobs;
    for (auto it = queued_.begin(); it != queued_.end(); ++it) {
      const int running = CountTenant(running_, it->job->tenant());
      if (running < next_running) {
        next = it;
        next_running = running;
      }
    }
    if (next == queued_.end()) break;
    Entry entry = std::move(*next);
    queued_.erase(next);
    StartLocked(std::move(entry), started);
    promoted = true;
  }
  if (promoted) {
    metrics_.JobsQueued(static_cast<double>(queued_.size()));
    work_available_.SignalAll();
  }
}

Scheduler::EntryList::iterator Scheduler::FindDispatchableLocked() {
  auto found = running_.end();
  uint64_t found_served = 0;
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    Job& job = *it->job;
    const uint64_t last_served = *it->tenant_served;
    // Only the first dispatchable job of each tenant is a candidate, and
    // only a tenant served before the one found can beat it.
    if (found != running_.end() && last_served >= found_served) continue;
    // A pipeline's later stages add shards as their rows become known.
    if (!job.HasShardToStart() || it->in_progress >= job.spec().num_workers ||
        job.token().IsCancelled()) {
      continue;
    }
    found = it;
    found_served = last_served;
    if (last_served == 0) break;  // never served: none comes before it
  }
  return found;
}

Scheduler::Ended Scheduler::TakeIfDoneLocked(EntryList::iterator entry) {
  if (entry->in_progress > 0) return {};
  const int64_t unstarted = entry->job->shards_to_run() - entry->started;
  if (unstarted > 0 && !entry->job->token().IsCancelled()) return {};
  metrics_.ShardsQueued(-static_cast<double>(unstarted));
  Ended ended{std::move(entry->job),
              std::move(entry->timeout),
              std::move(entry->on_cancel),
              {}};
  running_.erase(entry);
  if (CountTenant(running_, ended.job->tenant()) == 0) {
    tenant_served_.erase(ended.job->tenant());
  }
  ReportEnqueuedTokensLocked(ended.job->tenant());
  PromoteQueuedLocked(ended.started);
  return ended;
}

void Scheduler::OnJobCancelled(Job* job) {
  Ended ended;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->job.get() == job) {
        ended = TakeIfDoneLocked(it);
        break;
      }
    }
    for (auto it = queued_.begin(); it != queued_.end(); ++it) {
      if (it->job.get() == job) {
        ended.job = std::move(it->job);
        ended.on_cancel = std::move(it->on_cancel);
        queued_.erase(it);
        metrics_.JobsQueued(static_cast<double>(queued_.size()));
        ReportEnqueuedTokensLocked(ended.job->tenant());
        break;
      }
    }
  }
  Finish(std::move(ended));
}

void Scheduler::StartShard(std::shared_ptr<Job> job, const ShardSpec& shard) {
  metrics_.ShardsQueued(-1);
  metrics_.WorkerBusy(1);
  const absl::Time started = absl::Now();
  absl::StatusOr<ShardInput> input = job->ReadInput(shard);
  if (!input.ok()) {
    ShardOutcome failed;
    failed.status = input.status();
    return EndShard(job, shard, std::move(failed), started);
  }
  Job& raw = *job;
  runner_.Start(
      raw.spec(), shard, *std::move(input), raw.token(),
      [this, job = std::move(job), shard,
       started](ShardRunner::Continuation continuation) {
        QueueReady(Ready{job, shard, started, std::move(continuation)});
      });
}

void Scheduler::QueueReady(Ready ready) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    ready_.push_back(std::move(ready));
    // Workers that are serving come back to the queue before they wait: a
    // sleeping one is woken only while fewer serve than there are CPUs, so
    // a burst of replies costs a wakeup or two, not one per shard.
    wake = serving_ < serving_target_;
  }
  if (wake) work_available_.Signal();
}

void Scheduler::EndShard(const std::shared_ptr<Job>& job,
                         const ShardSpec& shard, ShardOutcome outcome,
                         absl::Time started) {
  // A pipeline's shard counts once its events are committed: the commit
  // hands it back to the workers, as replies do.
  const bool counted =
      job->ReportShard(shard, std::move(outcome), absl::Now() - started,
                       [this, job, shard, started] {
                         QueueReady(Ready{job, shard, started, nullptr});
                       });
  metrics_.WorkerBusy(-1);
  if (counted) return FreeShardPlace(job, /*holds_worker_place=*/true);
  // Waiting for its commit, it needs no worker: another shard may start.
  absl::MutexLock lock(&mu_);
  --shards_in_progress_;
}

void Scheduler::FreeShardPlace(const std::shared_ptr<Job>& job,
                               bool holds_worker_place) {
  Ended ended;
  int64_t shards_added = 0;
  {
    absl::MutexLock lock(&mu_);
    if (holds_worker_place) --shards_in_progress_;
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->job == job) {
        // The shard may have released rows into a pipeline's next stage.
        shards_added = job->shards_to_run() - it->shards_known;
        it->shards_known += shards_added;
        --it->in_progress;
        ended = TakeIfDoneLocked(it);
        break;
      }
    }
  }
  if (shards_added > 0) {
    metrics_.ShardsQueued(static_cast<double>(shards_added));
    work_available_.SignalAll();
  }
  Finish(std::move(ended));
}

void Scheduler::WorkerLoop() {
  bool serving = false;  // counted in serving_
  while (true) {
    std::optional<Ready> ready;
    std::shared_ptr<Job> job;
    ShardSpec shard;
    {
      absl::MutexLock lock(&mu_);
      if (!serving) ++serving_;
      serving = true;
      EntryList::iterator entry = running_.end();
      while (!stopping_ && ready_.empty() &&
             (shards_in_progress_ >= options_.max_workers ||
              (entry = FindDispatchableLocked()) == running_.end())) {
        --serving_;
        work_available_.Wait(&mu_);
        ++serving_;
      }
      if (stopping_) {
        --serving_;
        return;
      }
      if (!ready_.empty()) {
        ready.emplace(std::move(ready_.front()));
        ready_.pop_front();
      } else {
        job = entry->job;
        shard = job->StartNextShard();
        ++entry->started;
        ++entry->in_progress;
        ++shards_in_progress_;
        *entry->tenant_served = ++dispatches_;
        running_.splice(running_.end(), running_, entry);
        // Starting a shard reads its rows and may wait for a backend's
        // first batching decision: this worker does not serve the queue
        // until it is back.
        --serving_;
        serving = false;
      }
    }
    if (ready.has_value() && ready->continuation == nullptr) {
      FreeShardPlace(ready->job, /*holds_worker_place=*/false);
    } else if (ready.has_value()) {
      // nullopt: the shard sent a later step's requests and is in flight.
      if (std::optional<ShardOutcome> outcome =
              std::move(ready->continuation)()) {
        EndShard(ready->job, ready->shard, *std::move(outcome), ready->started);
      }
    } else {
      StartShard(std::move(job), shard);
    }
  }
}

}  // namespace sdg
