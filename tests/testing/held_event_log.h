// An event log whose commits wait while the test holds them, as they do on
// a slow disk: an append is numbered at once and committed (handed to an
// in-memory log that readers read) only once the test releases it. Commit
// notifications run on the releasing thread, as they run on a store's
// committing thread.
#ifndef SDG_TESTS_TESTING_HELD_EVENT_LOG_H_
#define SDG_TESTS_TESTING_HELD_EVENT_LOG_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/store/memory_event_log.h"

namespace sdg::testing {

class HeldEventLog final : public EventLog {
 public:
  HeldEventLog() : committed_(MemoryEventLog::Create()) {}

  // Returns once `count` groups wait to be committed.
  void AwaitHeldGroups(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return held_.size() >= count;
    };
    mu_.Await(absl::Condition(&enough));
  }
  // Commits what is held and everything appended from now on.
  void Release() {
    while (true) {
      std::deque<std::vector<LogEvent>> groups;
      {
        absl::MutexLock lock(&mu_);
        if (held_.empty()) {
          holding_ = false;
          return;
        }
        groups.swap(held_);
      }
      // In order, on this thread: appends queue behind until it is done.
      for (std::vector<LogEvent>& group : groups) {
        committed_->AppendGroup(absl::MakeSpan(group));
        RunDueWaiters();
      }
    }
  }

  uint64_t AppendGroup(absl::Span<LogEvent> group) override {
    {
      absl::MutexLock lock(&mu_);
      for (LogEvent& event : group) event.set_sequence(++appended_);
      if (holding_) {
        held_.emplace_back(group.begin(), group.end());
        return appended_;
      }
    }
    committed_->AppendGroup(group);
    RunDueWaiters();
    return group.back().sequence();
  }
  void AwaitRoom() override {}
  void End(absl::Status status) override { committed_->End(status); }
  void AwaitCommitted() override {
    absl::MutexLock lock(&mu_);
    auto released = [this]()
                        ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !holding_; };
    mu_.Await(absl::Condition(&released));
  }
  void SetOnCommitError(std::function<void(absl::Status)> callback) override {
    committed_->SetOnCommitError(std::move(callback));
  }
  uint64_t last_sequence() const override {
    return committed_->last_sequence();
  }
  absl::Status commit_error() const override {
    return committed_->commit_error();
  }
  absl::StatusOr<std::unique_ptr<Reader>> Read(
      uint64_t after_sequence) override {
    return committed_->Read(after_sequence);
  }
  bool NotifyAfter(uint64_t sequence, std::function<void()> callback) override {
    absl::MutexLock lock(&mu_);
    if (committed_->last_sequence() > sequence) return false;
    waiters_.emplace(sequence, std::move(callback));
    return true;
  }

 private:
  void RunDueWaiters() {
    std::vector<std::function<void()>> due;
    {
      absl::MutexLock lock(&mu_);
      const uint64_t committed = committed_->last_sequence();
      auto end = waiters_.lower_bound(committed);
      for (auto it = waiters_.begin(); it != end; ++it) {
        due.push_back(std::move(it->second));
      }
      waiters_.erase(waiters_.begin(), end);
    }
    for (std::function<void()>& callback : due) callback();
  }

  const std::shared_ptr<EventLog> committed_;
  absl::Mutex mu_;
  bool holding_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::vector<LogEvent>> held_ ABSL_GUARDED_BY(mu_);
  // Callbacks by the sequence an event must come after.
  std::multimap<uint64_t, std::function<void()>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_HELD_EVENT_LOG_H_
