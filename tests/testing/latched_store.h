// The in-memory store, except that while its latch is shut for a job, that
// job's record writes (AddJob, UpdateJob) wait for the test to open it, as
// a write does on a stalled disk, and that a job's event log can be made to
// hold its commits (HoldCommitsOf). Remembers the last state written for each
// job and the names of the threads that wrote records, so that a test can
// show which threads a stalled write holds up, and which run store writes.
#ifndef SDG_TESTS_TESTING_LATCHED_STORE_H_
#define SDG_TESTS_TESTING_LATCHED_STORE_H_

#include <pthread.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "server/store/memory_job_store.h"
#include "tests/testing/held_event_log.h"

namespace sdg::testing {

class LatchedStore final : public MemoryJobStore {
 public:
  // Shuts the latch for `job_id` too.
  void ShutFor(const std::string& job_id) {
    absl::MutexLock lock(&latch_mu_);
    latched_jobs_.insert(job_id);
  }
  void Open() {
    absl::MutexLock lock(&latch_mu_);
    latched_jobs_.clear();
  }
  // Returns once `writes` writes are waiting on the latch.
  void AwaitWaiting(int writes = 1) {
    absl::MutexLock lock(&latch_mu_);
    auto waiting = [this, writes]() ABSL_SHARED_LOCKS_REQUIRED(latch_mu_) {
      return waiting_ >= writes;
    };
    latch_mu_.Await(absl::Condition(&waiting));
  }
  std::optional<v1::JobState> LastSavedState(const std::string& job_id) {
    absl::MutexLock lock(&latch_mu_);
    auto it = saved_.find(job_id);
    if (it == saved_.end()) return std::nullopt;
    return it->second;
  }
  // The names of the threads that added, updated or removed records.
  std::set<std::string> WriterThreads() {
    absl::MutexLock lock(&latch_mu_);
    return writer_threads_;
  }

  // The log the job opens next commits only when the test releases it.
  std::shared_ptr<HeldEventLog> HoldCommitsOf(const std::string& job_id) {
    absl::MutexLock lock(&latch_mu_);
    return held_logs_[job_id] = std::make_shared<HeldEventLog>();
  }

  absl::StatusOr<std::shared_ptr<EventLog>> OpenJobLog(
      const std::string& job_id,
      absl::FunctionRef<void(const LogEvent&)> replay) override {
    {
      absl::MutexLock lock(&latch_mu_);
      if (auto held = held_logs_.find(job_id); held != held_logs_.end()) {
        return held->second;
      }
    }
    return MemoryJobStore::OpenJobLog(job_id, replay);
  }
  std::shared_ptr<EventLog> OpenFinishedJobLog(
      const std::string& job_id) override {
    {
      absl::MutexLock lock(&latch_mu_);
      if (auto held = held_logs_.find(job_id); held != held_logs_.end()) {
        return held->second;
      }
    }
    return MemoryJobStore::OpenFinishedJobLog(job_id);
  }
  absl::Status AddJob(const JobRecord& record) override {
    AwaitLatch(record);
    return MemoryJobStore::AddJob(record);
  }
  absl::Status UpdateJob(const JobRecord& record) override {
    AwaitLatch(record);
    return MemoryJobStore::UpdateJob(record);
  }
  absl::Status RemoveJob(const std::string& job_id) override {
    NoteWriter();
    return MemoryJobStore::RemoveJob(job_id);
  }

 private:
  void AwaitLatch(const JobRecord& record) {
    NoteWriter();
    absl::MutexLock lock(&latch_mu_);
    ++waiting_;
    auto open = [&]() ABSL_SHARED_LOCKS_REQUIRED(latch_mu_) {
      return !latched_jobs_.contains(record.job_id);
    };
    latch_mu_.Await(absl::Condition(&open));
    --waiting_;
    saved_[record.job_id] = record.state;
  }
  void NoteWriter() {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    absl::MutexLock lock(&latch_mu_);
    writer_threads_.insert(name);
  }

  absl::Mutex latch_mu_;
  std::set<std::string> latched_jobs_ ABSL_GUARDED_BY(latch_mu_);
  int waiting_ ABSL_GUARDED_BY(latch_mu_) = 0;
  std::map<std::string, v1::JobState> saved_ ABSL_GUARDED_BY(latch_mu_);
  std::set<std::string> writer_threads_ ABSL_GUARDED_BY(latch_mu_);
  std::map<std::string, std::shared_ptr<HeldEventLog>> held_logs_
      ABSL_GUARDED_BY(latch_mu_);
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_LATCHED_STORE_H_
