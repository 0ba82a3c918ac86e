// One job's events in sequence order (1, 2, 3...): appended by the job,
// committed by the store, then read by watchers. A reader never sees an
// event that is not committed, so what a watcher was sent survives a crash.
//
// Format, the same in memory and on disk (events.log):
//   "SDGLOG1\n", then per event a record:
//   u32 payload size, u32 CRC-32 of (sequence, payload), u64 sequence,
//   payload (a serialized sdg.v1.JobEvent); little-endian. The size word's
//   top bit says the next record belongs to the same group: a group (a
//   shard's results and errors) is committed, replayed and cut whole.
// A file log is committed by a LogCommitter (group commit: one write and one
// fdatasync per log for everything appended since its last round). Opening
// an existing file replays its records and cuts a torn tail (a record that
// is short or fails its CRC, left by a crash mid-write), back to the end of
// the last whole group.
#ifndef SDG_SERVER_JOBS_EVENT_LOG_H_
#define SDG_SERVER_JOBS_EVENT_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/file_util.h"

namespace sdg {

class LogCommitter;

class EventLog : public std::enable_shared_from_this<EventLog> {
 public:
  // Events committed as soon as they are appended, kept in memory.
  static std::shared_ptr<EventLog> InMemory();
  // Opens `path` for appending, creating it if missing. Every committed event
  // already in it goes to `replay`, in order; a torn tail is cut off.
  static absl::StatusOr<std::shared_ptr<EventLog>> OpenFile(
      std::string path, LogCommitter& committer,
      absl::FunctionRef<void(const v1::JobEvent&)> replay);
  // A log that is complete: its job finished. Nothing can be appended.
  static std::shared_ptr<EventLog> OpenFinished(std::string path);

  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Sets `event`'s sequence and queues a copy for commit; never blocks.
  uint64_t Append(v1::JobEvent& event);
  // The same for events that are committed together or not at all: a
  // reader sees all of them or none. Returns the last one's sequence.
  uint64_t AppendGroup(absl::Span<v1::JobEvent> group);
  // Blocks while more than kMaxUncommittedBytes wait for the disk.
  void AwaitRoom();
  // Nothing more will be appended. Readers end with `status` (OK: the job
  // finished; UNAVAILABLE: it was suspended) once they have read every
  // committed event.
  void End(absl::Status status);
  // Blocks until everything appended is committed (or committing failed).
  void AwaitCommitted();
  // Runs `callback` (once, on the committer thread) if committing fails:
  // disk full, state_dir unwritable. Nothing appended after is committed.
  void SetOnCommitError(std::function<void(absl::Status)> callback);

  // The last committed event's sequence (0: none yet).
  uint64_t last_sequence() const;
  // Why committing failed, or OK.
  absl::Status commit_error() const;

  // A committed event as the log holds it, ready to send as it is.
  struct EncodedEvent {
    uint64_t sequence = 0;
    // Which event it is, read from its field tag without parsing it.
    v1::JobEvent::EventCase event_case = v1::JobEvent::EVENT_NOT_SET;
    std::string bytes;  // a serialized sdg.v1.JobEvent
  };
  // A reader's position in the log.
  class Reader {
   public:
    // The next committed event; nullopt when every committed event was read.
    absl::StatusOr<std::optional<EncodedEvent>> Next();
    // Once every committed event was read: why the log ends (OK after
    // `finished`), or nullopt while more may come.
    std::optional<absl::Status> End() const;
    uint64_t last_read() const { return last_read_; }
    EventLog& log() const { return *log_; }

   private:
    friend class EventLog;
    Reader(std::shared_ptr<EventLog> log, uint64_t after, UniqueFd fd)
        : log_(std::move(log)),
          after_(after),
          last_read_(after),
          fd_(std::move(fd)) {}
    // Copies [offset, offset + size) of the log, below `limit` (committed).
    absl::StatusOr<size_t> Read(int64_t offset, size_t size, int64_t limit,
                                char* out);

    // File logs are read ahead in chunks of this size: a watcher behind by
    // a commit round reads it in one pread, not two per event.
    static constexpr size_t kReadAhead = 256 << 10;

    const std::shared_ptr<EventLog> log_;
    const uint64_t after_;  // events up to this one are skipped
    uint64_t last_read_;
    int64_t position_ = 0;
    UniqueFd fd_;  // file logs: the reader's own
    // File logs: committed bytes read ahead, from offset read_ahead_start_.
    std::string read_ahead_;
    int64_t read_ahead_start_ = 0;
  };
  // Events after `after_sequence`.
  absl::StatusOr<std::unique_ptr<Reader>> Read(uint64_t after_sequence);
  // Runs `callback` once (any thread, no lock held) when an event after
  // `sequence` is committed or the log ends. Returns false, and never runs
  // it, if that is already so.
  bool NotifyAfter(uint64_t sequence, std::function<void()> callback);

  static constexpr size_t kMaxUncommittedBytes = 64 << 20;

 private:
  friend class LogCommitter;
  EventLog(std::string path, LogCommitter* committer, UniqueFd fd);

  // For the committer: takes what is pending.
  struct Pending {
    std::string bytes;
    uint64_t last_sequence = 0;
  };
  Pending TakePending();
  // For the committer: `pending` is on disk, or failed to get there.
  void Committed(const Pending& pending, const absl::Status& status);
  // A finished log learns where it ends on its first Read.
  absl::Status ScanFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Callbacks to run once mu_ is released.
  std::vector<std::function<void()>> TakeWaitersLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;         // empty for memory logs
  LogCommitter* const committer_;  // null for memory and finished logs
  const UniqueFd fd_;              // append fd of a file log

  mutable absl::Mutex mu_;
  std::string memory_ ABSL_GUARDED_BY(mu_);  // memory logs: the bytes
  std::string pending_ ABSL_GUARDED_BY(mu_);
  bool queued_ ABSL_GUARDED_BY(mu_) = false;  // with the committer
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t committed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  bool scanned_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status commit_error_ ABSL_GUARDED_BY(mu_);
  std::function<void(absl::Status)> on_commit_error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> waiters_ ABSL_GUARDED_BY(mu_);
};

// The thread that commits file logs: a round takes every log with pending
// events, writes each and fdatasyncs each, then tells their readers.
class LogCommitter {
 public:
  // At most one round per `min_round_interval`: a busy server then fsyncs a
  // few hundred times a second, each time for everything pending, instead of
  // once per shard; an event waits at most that long to be committed.
  static constexpr absl::Duration kDefaultMinRoundInterval =
      absl::Milliseconds(5);
  explicit LogCommitter(
      absl::Duration min_round_interval = kDefaultMinRoundInterval);
  // Commits what is pending, then stops.
  ~LogCommitter();

  // Rounds committed so far (for tests and the benchmark).
  int64_t rounds() const;

 private:
  friend class EventLog;
  void Enqueue(std::shared_ptr<EventLog> log);
  void Loop();

  const absl::Duration min_round_interval_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<EventLog>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_EVENT_LOG_H_
