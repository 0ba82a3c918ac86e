// One job's events in sequence order (1, 2, 3...): appended by the job,
// committed by the store, then read by watchers. A reader never sees an
// event that is not committed, so what a watcher was sent survives a crash.
//
// This is the interface the layers above use. Implementations:
// MemoryEventLog (--ephemeral: committed as soon as appended) and
// FileEventLog (the default store: a file per job, group-committed by a
// LogCommitter; its record format is log_format.h). A shared database's
// log implements it too: its commit notification may come from another
// process.
#ifndef SDG_SERVER_JOBS_EVENT_LOG_H_
#define SDG_SERVER_JOBS_EVENT_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/store/log_event.h"

namespace sdg {

// A commit (or any store write) refused because another replica took over
// this one's jobs: the PostgreSQL store's replica lease. Neither the job's
// failure nor a transient error here: the job goes on on the other
// replica, where a client that calls again finds it (the RPC edge makes
// this UNAVAILABLE).
inline constexpr absl::string_view kFencedOutPayload = "sdg.dev/fenced-out";
inline absl::Status FencedOutError(absl::string_view message) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kFencedOutPayload, absl::Cord());
  return status;
}
inline bool IsFencedOut(const absl::Status& status) {
  return status.GetPayload(kFencedOutPayload).has_value();
}

class EventLog {
 public:
  virtual ~EventLog() = default;

  // Sets `event`'s sequence and queues a copy for commit; never blocks.
  uint64_t Append(LogEvent& event) {
    return AppendGroup(absl::MakeSpan(&event, 1));
  }
  // The same for events that are committed together or not at all: a
  // reader sees all of them or none. Returns the last one's sequence.
  virtual uint64_t AppendGroup(absl::Span<LogEvent> group) = 0;
  // Blocks while more than kMaxUncommittedBytes wait to be committed.
  virtual void AwaitRoom() = 0;
  // Nothing more will be appended. Readers end with `status` (OK: the job
  // finished; UNAVAILABLE: it was suspended) once they have read every
  // committed event.
  virtual void End(absl::Status status) = 0;
  // Blocks until everything appended is committed (or committing failed).
  virtual void AwaitCommitted() = 0;
  // Runs `callback` (once, on the committing thread) if committing fails:
  // disk full, state_dir unwritable. Nothing appended after is committed.
  virtual void SetOnCommitError(std::function<void(absl::Status)> callback) = 0;

  // The last committed event's sequence (0: none yet).
  virtual uint64_t last_sequence() const = 0;
  // Why committing failed, or OK.
  virtual absl::Status commit_error() const = 0;

  // A committed event as the log holds it, ready to send as it is.
  struct EncodedEvent {
    uint64_t sequence = 0;
    // Which event it is, known without parsing it.
    LogEvent::EventCase event_case = LogEvent::EVENT_NOT_SET;
    std::string bytes;  // a serialized sdg.store.v1.LogEvent
  };
  // A reader's position in the log. It keeps its log alive.
  class Reader {
   public:
    virtual ~Reader() = default;
    // The next committed event; nullopt when every committed event was read.
    virtual absl::StatusOr<std::optional<EncodedEvent>> Next() = 0;
    // Once every committed event was read: why the log ends (OK after
    // `finished`), or nullopt while more may come.
    virtual std::optional<absl::Status> End() const = 0;
    virtual uint64_t last_read() const = 0;
    virtual EventLog& log() const = 0;
  };
  // Events after `after_sequence`.
  virtual absl::StatusOr<std::unique_ptr<Reader>> Read(
      uint64_t after_sequence) = 0;
  // Runs `callback` once (any thread, no lock held) when an event after
  // `sequence` is committed or the log ends. Returns false, and never runs
  // it, if that is already so.
  virtual bool NotifyAfter(uint64_t sequence,
                           std::function<void()> callback) = 0;

  static constexpr size_t kMaxUncommittedBytes = 64 << 20;
};

// What a log knows of its commits, and who waits for the next one: the
// bookkeeping every implementation shares. Its owner guards it with the
// owner's mutex and runs the callbacks it returns once that is released.
class LogProgress {
 public:
  using Callbacks = std::vector<std::function<void()>>;

  // A log whose events up to `committed` are committed already.
  explicit LogProgress(uint64_t committed = 0)
      : appended_(committed), committed_(committed) {}

  // The sequence of the next event appended.
  uint64_t Append() { return ++appended_; }
  // Events up to `sequence` are committed.
  [[nodiscard]] Callbacks Committed(uint64_t sequence) {
    committed_ = sequence;
    return std::exchange(waiters_, {});
  }
  // Committing failed: nothing more will be. The first error stays.
  [[nodiscard]] Callbacks Failed(absl::Status error) {
    if (commit_error_.ok()) commit_error_ = std::move(error);
    return std::exchange(waiters_, {});
  }
  // Nothing more will be appended; the first end stays.
  [[nodiscard]] Callbacks End(absl::Status status) {
    if (end_.has_value()) return {};
    end_ = std::move(status);
    return all_committed() ? std::exchange(waiters_, {}) : Callbacks{};
  }
  // NotifyAfter's promise: false if an event after `sequence` is committed
  // or the log has ended for its readers.
  bool Notify(uint64_t sequence, std::function<void()> callback) {
    if (committed_ > sequence || ended()) return false;
    waiters_.push_back(std::move(callback));
    return true;
  }
  // Reader::End for a reader that read up to `last_read`.
  std::optional<absl::Status> EndFor(uint64_t last_read) const {
    if (last_read < committed_) return std::nullopt;
    if (!commit_error_.ok()) return commit_error_;
    if (end_.has_value() && all_committed()) return *end_;
    return std::nullopt;
  }

  uint64_t appended() const { return appended_; }
  uint64_t committed() const { return committed_; }
  bool all_committed() const { return committed_ == appended_; }
  const absl::Status& commit_error() const { return commit_error_; }

 private:
  // Readers see no more events: committing failed, or the log ended and
  // all it holds is committed.
  bool ended() const {
    return !commit_error_.ok() || (end_.has_value() && all_committed());
  }

  uint64_t appended_;
  uint64_t committed_;
  std::optional<absl::Status> end_;
  absl::Status commit_error_;
  Callbacks waiters_;
};

// The part of a group-committed log that every implementation with a
// committer shares: its mutex, its LogProgress, the commit-error callback,
// and the EventLog methods that only read or wait on them. Implementations
// add appending, reading and what their committer hands them.
class CommittedLog : public EventLog {
 public:
  void End(absl::Status status) override {
    LogProgress::Callbacks waiters;
    {
      absl::MutexLock lock(&mu_);
      waiters = progress_.End(std::move(status));
    }
    for (auto& waiter : waiters) waiter();
  }
  void AwaitCommitted() override {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return progress_.all_committed() || !progress_.commit_error().ok();
    };
    mu_.Await(absl::Condition(&done));
  }
  void SetOnCommitError(std::function<void(absl::Status)> callback) override {
    absl::MutexLock lock(&mu_);
    on_commit_error_ = std::move(callback);
  }
  uint64_t last_sequence() const override {
    absl::MutexLock lock(&mu_);
    return progress_.committed();
  }
  absl::Status commit_error() const override {
    absl::MutexLock lock(&mu_);
    return progress_.commit_error();
  }
  bool NotifyAfter(uint64_t sequence, std::function<void()> callback) override {
    absl::MutexLock lock(&mu_);
    return progress_.Notify(sequence, std::move(callback));
  }

 protected:
  explicit CommittedLog(uint64_t committed = 0) : progress_(committed) {}

  // Reader::End for a reader that read up to `last_read`.
  std::optional<absl::Status> EndFor(uint64_t last_read) const {
    absl::MutexLock lock(&mu_);
    return progress_.EndFor(last_read);
  }
  // For the committer: events up to `last` are committed, or (an error)
  // never will be; wakes the waiters, and runs the commit-error callback
  // once. Nothing after a first error counts.
  void ReportCommit(uint64_t last, const absl::Status& status) {
    LogProgress::Callbacks waiters;
    std::function<void(absl::Status)> on_error;
    {
      absl::MutexLock lock(&mu_);
      if (!progress_.commit_error().ok()) return;
      if (status.ok()) {
        waiters = progress_.Committed(last);
      } else {
        waiters = progress_.Failed(status);
        on_error = on_commit_error_;
      }
    }
    for (auto& waiter : waiters) waiter();
    if (on_error) on_error(status);
  }

  mutable absl::Mutex mu_;
  LogProgress progress_ ABSL_GUARDED_BY(mu_);
  std::function<void(absl::Status)> on_commit_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_EVENT_LOG_H_
