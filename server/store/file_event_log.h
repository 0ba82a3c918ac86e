// The default store's event log: a file per job (events.log, in
// log_format.h's records), committed by a LogCommitter (group commit: one
// write and one fdatasync per log for everything appended since its last
// round). Opening an existing file replays its records and cuts a torn
// tail (a record that is short or fails its CRC, left by a crash
// mid-write), back to the end of the last whole group.
#ifndef SDG_SERVER_STORE_FILE_EVENT_LOG_H_
#define SDG_SERVER_STORE_FILE_EVENT_LOG_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/commit_schedule.h"
#include "server/store/event_log.h"
#include "server/store/file_util.h"
#include "server/store/log_event.h"

namespace sdg {

class LogCommitter;

class FileEventLog final : public CommittedLog,
                           public std::enable_shared_from_this<FileEventLog> {
 public:
  // Opens `path` for appending, creating it if missing. Every committed event
  // already in it goes to `replay`, in order; a torn tail is cut off.
  static absl::StatusOr<std::shared_ptr<EventLog>> Open(
      std::string path, LogCommitter& committer,
      absl::FunctionRef<void(const LogEvent&)> replay);
  // A log that is complete: its job finished. Nothing can be appended; it
  // learns where it ends on its first Read.
  static std::shared_ptr<EventLog> OpenFinished(std::string path);

  uint64_t AppendGroup(absl::Span<LogEvent> group) override;
  void AwaitRoom() override;
  absl::StatusOr<std::unique_ptr<Reader>> Read(
      uint64_t after_sequence) override;

 private:
  friend class LogCommitter;
  class FileReader;
  FileEventLog(std::string path, LogCommitter* committer, UniqueFd fd);

  // For the committer: takes what is pending.
  struct Pending {
    std::string bytes;
    uint64_t last_sequence = 0;
  };
  Pending TakePending();
  // For the committer: `pending` is on disk, or failed to get there for
  // good.
  void Committed(const Pending& pending, const absl::Status& status);
  // For the committer: `pending` failed to get there and is tried again
  // with what was appended since. True if the committer is to queue the
  // log again (false: an append queued it already).
  bool Retry(const Pending& pending);
  absl::Status ScanFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  LogCommitter* const committer_;  // null for a finished log
  const UniqueFd fd_;              // the append fd; none for a finished log

  std::string pending_ ABSL_GUARDED_BY(mu_);
  bool queued_ ABSL_GUARDED_BY(mu_) = false;  // with the committer
  int64_t committed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool scanned_ ABSL_GUARDED_BY(mu_) = true;
};

// The thread that commits file logs: a round takes every log with pending
// events, writes each and fdatasyncs each, then tells their readers.
//
// A round that cannot commit (disk full, state_dir unwritable) is cut back
// to the last whole record and tried again with backoff, the events kept in
// memory meanwhile (a job's workers wait once kMaxUncommittedBytes are
// held), so that a full disk pauses jobs instead of ending them; past
// `max_outage` the logs that still fail fail for good, and their jobs are
// suspended. Stopping makes one last attempt.
class LogCommitter {
 public:
  using Options = CommitterOptions;
  explicit LogCommitter(Options options);
  LogCommitter() : LogCommitter(Options()) {}
  // Commits what is pending (one last attempt), then stops.
  ~LogCommitter();

  // Rounds committed so far (for tests and the benchmark).
  int64_t rounds() const;
  // False while commits are failing and being retried.
  bool up() const;

 private:
  friend class FileEventLog;
  void Enqueue(std::shared_ptr<FileEventLog> log);
  void Loop();
  // Writes and syncs one round's logs, then tells each how it went.
  // Returns the logs to try again and the first error.
  std::vector<std::shared_ptr<FileEventLog>> CommitRound(
      const std::vector<std::shared_ptr<FileEventLog>>& logs, bool last_try,
      absl::Status& error);

  CommitSchedule schedule_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<FileEventLog>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_FILE_EVENT_LOG_H_
