// The PostgreSQL store's event log: one row per event in job_events,
// numbered by this log (one writer per job), committed by a
// PostgresCommitter: one statement per round for every log with pending
// events, so that the database sees a few hundred transactions a second,
// not one per shard. A round that fails on a transient error (the database
// down, restarting or failing over) is retried with what was appended
// since; a retried row that did reach the table is kept once (ON CONFLICT
// DO NOTHING on the job and sequence).
//
// Readers read the table, a page per short query, except for the events
// this log committed last (up to kRecentBytes), which they take from
// memory: a watcher following a live job costs the database nothing.
#ifndef SDG_SERVER_STORE_POSTGRES_EVENT_LOG_H_
#define SDG_SERVER_STORE_POSTGRES_EVENT_LOG_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/store/commit_schedule.h"
#include "server/store/event_log.h"
#include "server/store/log_event.h"
#include "server/store/postgres.h"
#include "server/store/replica_lease.h"

namespace sdg {

class PostgresCommitter;

class PostgresEventLog final
    : public CommittedLog,
      public std::enable_shared_from_this<PostgresEventLog> {
 public:
  // The log of `job_id` whose events up to `committed` are in the table.
  static std::shared_ptr<PostgresEventLog> Open(std::shared_ptr<pg::Pool> pool,
                                                PostgresCommitter& committer,
                                                std::string job_id,
                                                uint64_t committed);
  // A log that is complete: its job finished. Nothing can be appended; it
  // learns where it ends on its first Read.
  static std::shared_ptr<PostgresEventLog> OpenFinished(
      std::shared_ptr<pg::Pool> pool, std::string job_id);

  uint64_t AppendGroup(absl::Span<LogEvent> group) override;
  void AwaitRoom() override;
  absl::StatusOr<std::unique_ptr<Reader>> Read(
      uint64_t after_sequence) override;

  // How much of what it committed last a log keeps for its readers.
  static constexpr size_t kRecentBytes = 1 << 20;

 private:
  friend class PostgresCommitter;
  class TableReader;
  PostgresEventLog(std::shared_ptr<pg::Pool> pool, PostgresCommitter* committer,
                   std::string job_id, uint64_t committed);

  // For the committer: takes what is pending.
  std::vector<EncodedEvent> TakePending();
  // For the committer: `events` are in the table, or (error) will never
  // be.
  void Committed(std::vector<EncodedEvent> events, const absl::Status& status);
  // Copies the committed events after `after`, up to `max`, into the empty
  // `out` if recent_ holds the first of them. False if it does not (read
  // the table).
  bool ReadRecent(uint64_t after, size_t max,
                  std::deque<EncodedEvent>& out) const;
  // For the committer: `events` failed to get there and go back before
  // what was appended since. True if the committer is to queue the log
  // again (false: an append queued it already).
  bool Retry(std::vector<EncodedEvent> events);
  // For a finished log's first Read: where the table ends.
  absl::Status LoadEndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<pg::Pool> pool_;
  PostgresCommitter* const committer_;  // null for a finished log
  const std::string job_id_;

  std::vector<EncodedEvent> pending_ ABSL_GUARDED_BY(mu_);
  // Bytes appended and not yet committed (pending or in a round).
  size_t uncommitted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool queued_ ABSL_GUARDED_BY(mu_) = false;  // with the committer
  // The events committed last, in order, and their bytes (kRecentBytes at
  // most, but always the last round's).
  std::deque<EncodedEvent> recent_ ABSL_GUARDED_BY(mu_);
  size_t recent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool loaded_ ABSL_GUARDED_BY(mu_) = true;  // a finished log's end known
};

// The thread that commits PostgreSQL logs: a round takes every log with
// pending events and inserts them all in one statement (one transaction).
// Transient failures pause and retry (CommitSchedule); others, or an
// outage past max_outage, fail the round's logs.
class PostgresCommitter {
 public:
  // `lease` (null: none) fences every round: a round commits only while
  // the lease is this replica's. It outlives the committer.
  PostgresCommitter(std::string conninfo, CommitterOptions options,
                    ReplicaLease* lease = nullptr);
  // Commits what is pending (one last attempt), then stops.
  ~PostgresCommitter();

  int64_t rounds() const;
  bool up() const { return schedule_.up(); }

 private:
  friend class PostgresEventLog;
  void Enqueue(std::shared_ptr<PostgresEventLog> log);
  void Loop();
  // Inserts one round's events; returns the logs to try again and sets
  // `error` to the first error.
  std::vector<std::shared_ptr<PostgresEventLog>> CommitRound(
      const std::vector<std::shared_ptr<PostgresEventLog>>& logs, bool last_try,
      absl::Status& error);
  absl::Status Insert(
      const std::vector<std::shared_ptr<PostgresEventLog>>& logs,
      const std::vector<std::vector<EventLog::EncodedEvent>>& events);

  const std::string conninfo_;
  ReplicaLease* const lease_;
  CommitSchedule schedule_;
  // The committer's own connection (touched only by its thread).
  std::unique_ptr<pg::Connection> conn_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<PostgresEventLog>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_POSTGRES_EVENT_LOG_H_
