#include "server/store/postgres_event_log.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace sdg {
namespace {

// Events a reader fetches per query: few round trips, bounded memory.
constexpr int kReadPage = 512;

}  // namespace

// Reads committed events by sequence, a page per query, each query a short
// transaction of its own (no snapshot held while a watcher is slow).
class PostgresEventLog::TableReader final : public EventLog::Reader {
 public:
  TableReader(std::shared_ptr<PostgresEventLog> log, uint64_t after)
      : log_(std::move(log)), last_read_(after) {}

  absl::StatusOr<std::optional<EncodedEvent>> Next() override {
    if (page_.empty()) {
      uint64_t committed;
      {
        absl::MutexLock lock(&log_->mu_);
        committed = log_->progress_.committed();
      }
      if (last_read_ >= committed) return std::nullopt;
      if (log_->ReadRecent(last_read_, kReadPage, page_)) {
        // (No query: this log committed them a moment ago.)
      } else if (absl::Status s = Fetch(committed); !s.ok()) {
        return s;
      }
      if (page_.empty()) {
        return absl::DataLossError(absl::StrCat(
            "PostgreSQL: job ", log_->job_id_, "'s event ", last_read_ + 1,
            " is committed but missing from job_events"));
      }
    }
    EncodedEvent event = std::move(page_.front());
    page_.pop_front();
    last_read_ = event.sequence;
    return event;
  }
  std::optional<absl::Status> End() const override {
    return log_->EndFor(last_read_);
  }
  uint64_t last_read() const override { return last_read_; }
  EventLog& log() const override { return *log_; }

 private:
  absl::Status Fetch(uint64_t committed) {
    absl::StatusOr<pg::Pool::Lease> conn = log_->pool_->Acquire();
    if (!conn.ok()) return conn.status();
    absl::StatusOr<pg::Result> rows = (*conn)->Exec(
        "SELECT sequence, event_case, event FROM job_events "
        "WHERE job_id = $1 AND sequence > $2 AND sequence <= $3 "
        "ORDER BY sequence LIMIT $4",
        pg::Params()
            .Text(log_->job_id_)
            .Int64(static_cast<int64_t>(last_read_))
            .Int64(static_cast<int64_t>(committed))
            .Int64(kReadPage),
        "reading a job's events");
    if (!rows.ok()) return rows.status();
    uint64_t expected = last_read_ + 1;
    for (int i = 0; i < rows->rows(); ++i, ++expected) {
      EncodedEvent& event = page_.emplace_back();
      event.sequence = static_cast<uint64_t>(rows->Int64(i, 0));
      if (event.sequence != expected) {
        return absl::DataLossError(
            absl::StrCat("PostgreSQL: job ", log_->job_id_, "'s event ",
                         event.sequence, " follows event ", expected - 1));
      }
      event.event_case = static_cast<LogEvent::EventCase>(rows->Int32(i, 1));
      event.bytes = rows->String(i, 2);
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<PostgresEventLog> log_;
  uint64_t last_read_;
  std::deque<EncodedEvent> page_;
};

std::shared_ptr<PostgresEventLog> PostgresEventLog::Open(
    std::shared_ptr<pg::Pool> pool, PostgresCommitter& committer,
    std::string job_id, uint64_t committed) {
  return std::shared_ptr<PostgresEventLog>(new PostgresEventLog(
      std::move(pool), &committer, std::move(job_id), committed));
}

std::shared_ptr<PostgresEventLog> PostgresEventLog::OpenFinished(
    std::shared_ptr<pg::Pool> pool, std::string job_id) {
  std::shared_ptr<PostgresEventLog> log(
      new PostgresEventLog(std::move(pool), nullptr, std::move(job_id), 0));
  absl::MutexLock lock(&log->mu_);
  log->loaded_ = false;
  return log;
}

PostgresEventLog::PostgresEventLog(std::shared_ptr<pg::Pool> pool,
                                   PostgresCommitter* committer,
                                   std::string job_id, uint64_t committed)
    : CommittedLog(committed),
      pool_(std::move(pool)),
      committer_(committer),
      job_id_(std::move(job_id)) {}

uint64_t PostgresEventLog::AppendGroup(absl::Span<LogEvent> group) {
  uint64_t sequence = 0;
  bool enqueue = false;
  {
    absl::MutexLock lock(&mu_);
    // A group is committed in one statement, so a reader sees all of it or
    // none.
    for (LogEvent& event : group) {
      sequence = progress_.Append();
      event.set_sequence(sequence);
      EncodedEvent& encoded = pending_.emplace_back();
      encoded.sequence = sequence;
      encoded.event_case = event.event_case();
      encoded.bytes = event.SerializeAsString();
      uncommitted_bytes_ += encoded.bytes.size();
    }
    enqueue = !std::exchange(queued_, true);
  }
  if (enqueue) committer_->Enqueue(shared_from_this());
  return sequence;
}

void PostgresEventLog::AwaitRoom() {
  absl::MutexLock lock(&mu_);
  auto has_room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return uncommitted_bytes_ <= kMaxUncommittedBytes ||
           !progress_.commit_error().ok();
  };
  mu_.Await(absl::Condition(&has_room));
}

std::vector<EventLog::EncodedEvent> PostgresEventLog::TakePending() {
  absl::MutexLock lock(&mu_);
  queued_ = false;
  return std::exchange(pending_, {});
}

void PostgresEventLog::Committed(std::vector<EncodedEvent> events,
                                 const absl::Status& status) {
  if (events.empty()) return;
  const uint64_t last = events.back().sequence;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    for (EncodedEvent& event : events) {
      uncommitted_bytes_ -= event.bytes.size();
      recent_bytes_ += event.bytes.size();
      recent_.push_back(std::move(event));
    }
    while (recent_bytes_ > kRecentBytes && recent_.size() > events.size()) {
      recent_bytes_ -= recent_.front().bytes.size();
      recent_.pop_front();
    }
  }
  ReportCommit(last, status);
}

bool PostgresEventLog::ReadRecent(uint64_t after, size_t max,
                                  std::deque<EncodedEvent>& out) const {
  absl::MutexLock lock(&mu_);
  if (recent_.empty() || recent_.front().sequence > after + 1) return false;
  // recent_ is dense: the event after `after` is at this index.
  for (size_t i = after + 1 - recent_.front().sequence;
       i < recent_.size() && out.size() < max; ++i) {
    out.push_back(recent_[i]);
  }
  return !out.empty();
}

bool PostgresEventLog::Retry(std::vector<EncodedEvent> events) {
  absl::MutexLock lock(&mu_);
  events.insert(events.end(), std::make_move_iterator(pending_.begin()),
                std::make_move_iterator(pending_.end()));
  pending_ = std::move(events);
  return !std::exchange(queued_, true);
}

absl::Status PostgresEventLog::LoadEndLocked() {
  absl::StatusOr<pg::Pool::Lease> conn = pool_->Acquire();
  if (!conn.ok()) return conn.status();
  absl::StatusOr<pg::Result> last = (*conn)->Exec(
      "SELECT COALESCE(max(sequence), 0)::bigint FROM job_events "
      "WHERE job_id = $1",
      pg::Params().Text(job_id_), "reading where a job's events end");
  if (!last.ok()) return last.status();
  progress_ = LogProgress(static_cast<uint64_t>(last->Int64(0, 0)));
  (void)progress_.End(absl::OkStatus());
  loaded_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EventLog::Reader>> PostgresEventLog::Read(
    uint64_t after_sequence) {
  {
    absl::MutexLock lock(&mu_);
    if (!loaded_) {
      if (absl::Status s = LoadEndLocked(); !s.ok()) return s;
    }
  }
  return std::make_unique<TableReader>(shared_from_this(), after_sequence);
}

PostgresCommitter::PostgresCommitter(std::string conninfo,
                                     CommitterOptions options,
                                     ReplicaLease* lease)
    : conninfo_(std::move(conninfo)),
      lease_(lease),
      schedule_(std::move(options), "PostgreSQL event log"),
      thread_([this] { Loop(); }) {}

PostgresCommitter::~PostgresCommitter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

int64_t PostgresCommitter::rounds() const {
  absl::MutexLock lock(&mu_);
  return rounds_;
}

void PostgresCommitter::Enqueue(std::shared_ptr<PostgresEventLog> log) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(log));
}

void PostgresCommitter::Loop() {
  absl::Time next_round = absl::InfinitePast();
  while (true) {
    std::vector<std::shared_ptr<PostgresEventLog>> logs;
    bool last_try = false;
    {
      absl::MutexLock lock(&mu_);
      // Appends gather meanwhile; stopping commits at once.
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), next_round);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything is committed
      logs.swap(queue_);
      ++rounds_;
      last_try = stopping_ || schedule_.OutageOver();
    }
    absl::Status error;
    std::vector<std::shared_ptr<PostgresEventLog>> retry =
        CommitRound(logs, last_try, error);
    {
      absl::MutexLock lock(&mu_);
      for (auto& log : retry) queue_.push_back(std::move(log));
    }
    next_round = schedule_.AfterRound(error);
  }
}

std::vector<std::shared_ptr<PostgresEventLog>> PostgresCommitter::CommitRound(
    const std::vector<std::shared_ptr<PostgresEventLog>>& logs, bool last_try,
    absl::Status& error) {
  std::vector<std::vector<EventLog::EncodedEvent>> events;
  events.reserve(logs.size());
  for (const auto& log : logs) events.push_back(log->TakePending());
  error = Insert(logs, events);
  std::vector<std::shared_ptr<PostgresEventLog>> retry;
  for (size_t i = 0; i < logs.size(); ++i) {
    if (error.ok()) {
      logs[i]->Committed(std::move(events[i]), error);
    } else if (!last_try && pg::IsTransient(error) &&
               schedule_.options().max_outage > absl::ZeroDuration()) {
      if (logs[i]->Retry(std::move(events[i]))) retry.push_back(logs[i]);
    } else {
      Log(LogLevel::kError, "PostgreSQL event log: commit failed",
          {{"job_id", logs[i]->job_id_},
           {"error", std::string(error.message())}});
      logs[i]->Committed(std::move(events[i]), error);
    }
  }
  return retry;
}

absl::Status PostgresCommitter::Insert(
    const std::vector<std::shared_ptr<PostgresEventLog>>& logs,
    const std::vector<std::vector<EventLog::EncodedEvent>>& events) {
  std::vector<absl::string_view> job_ids;
  std::vector<int64_t> sequences;
  std::vector<int32_t> cases;
  std::vector<absl::string_view> bytes;
  for (size_t i = 0; i < logs.size(); ++i) {
    for (const EventLog::EncodedEvent& event : events[i]) {
      job_ids.push_back(logs[i]->job_id_);
      sequences.push_back(static_cast<int64_t>(event.sequence));
      cases.push_back(static_cast<int32_t>(event.event_case));
      bytes.push_back(event.bytes);
    }
  }
  if (sequences.empty()) return absl::OkStatus();
  if (conn_ == nullptr || !conn_->ok()) {
    conn_.reset();
    absl::StatusOr<std::unique_ptr<pg::Connection>> conn =
        pg::Connection::Open(conninfo_);
    if (!conn.ok()) return conn.status();
    conn_ = *std::move(conn);
  }
  pg::Params params;
  params.TextArray(job_ids).Int64Array(sequences).Int32Array(cases).BytesArray(
      bytes);
  // One statement: one transaction for the whole round. A row a failed
  // round did commit (its answer lost with the connection) is kept once.
  constexpr absl::string_view kInsert =
      "INSERT INTO job_events (job_id, sequence, event_case, event) "
      "SELECT * FROM unnest($1::text[], $2::bigint[], $3::integer[], "
      "$4::bytea[])";
  constexpr absl::string_view kOnConflict =
      " ON CONFLICT (job_id, sequence) DO NOTHING";
  if (lease_ == nullptr) {
    return conn_
        ->Exec(absl::StrCat(kInsert, kOnConflict), params, "committing events")
        .status();
  }
  // Fenced: nothing is inserted unless the lease is still this replica's,
  // and a takeover waits for the round (the fence holds the lease's row).
  lease_->AddFenceParams(params);
  SDG_ASSIGN_OR_RETURN(
      pg::Result fence,
      conn_->Exec(absl::StrCat("WITH ", ReplicaLease::Fence(5), ", added AS (",
                               kInsert, " WHERE EXISTS (SELECT 1 FROM fence)",
                               kOnConflict, ") SELECT 1 FROM fence"),
                  params, "committing events"));
  if (fence.rows() == 0) return lease_->Lost("committing events");
  return absl::OkStatus();
}

}  // namespace sdg
