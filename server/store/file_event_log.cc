#include "server/store/file_event_log.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "server/store/log_format.h"

namespace sdg {

using log_format::kMagic;

namespace {

// log_format's scan over the file open as `fd`, `size` bytes long.
absl::StatusOr<log_format::WholeRecords> ScanFile(
    int fd, int64_t size, const std::string& path,
    absl::FunctionRef<void(const LogEvent&)> replay) {
  return log_format::ScanWholeRecords(
      size,
      [&](int64_t offset, size_t n, char* out) {
        return ReadAt(fd, offset, n, out, path);
      },
      replay);
}

}  // namespace

class FileEventLog::FileReader final : public EventLog::Reader {
 public:
  FileReader(std::shared_ptr<FileEventLog> log, uint64_t after, UniqueFd fd)
      : log_(std::move(log)),
        after_(after),
        last_read_(after),
        fd_(std::move(fd)) {}

  absl::StatusOr<std::optional<EncodedEvent>> Next() override;
  std::optional<absl::Status> End() const override {
    return log_->EndFor(last_read_);
  }
  uint64_t last_read() const override { return last_read_; }
  EventLog& log() const override { return *log_; }

 private:
  // Copies [offset, offset + size) of the log, below `limit` (committed).
  absl::StatusOr<size_t> ReadCommitted(int64_t offset, size_t size,
                                       int64_t limit, char* out);

  // The log is read ahead in chunks of this size: a watcher behind by a
  // commit round reads it in one pread, not two per event.
  static constexpr size_t kReadAhead = 256 << 10;

  const std::shared_ptr<FileEventLog> log_;
  const uint64_t after_;  // events up to this one are skipped
  uint64_t last_read_;
  int64_t position_ = static_cast<int64_t>(kMagic.size());
  const UniqueFd fd_;  // the reader's own
  // Committed bytes read ahead, from offset read_ahead_start_.
  std::string read_ahead_;
  int64_t read_ahead_start_ = 0;
};

FileEventLog::FileEventLog(std::string path, LogCommitter* committer,
                           UniqueFd fd)
    : path_(std::move(path)), committer_(committer), fd_(std::move(fd)) {}

absl::StatusOr<std::shared_ptr<EventLog>> FileEventLog::Open(
    std::string path, LogCommitter& committer,
    absl::FunctionRef<void(const LogEvent&)> replay) {
  UniqueFd fd(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (fd.get() < 0) return FileError("open", path, errno);
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return FileError("seek", path, errno);
  log_format::WholeRecords whole;
  if (size < static_cast<off_t>(kMagic.size())) {
    // New, or torn before its first record: start it again.
    if (size > 0 && ::ftruncate(fd.get(), 0) != 0) {
      return FileError("truncate", path, errno);
    }
    if (absl::Status s = WriteAll(fd.get(), kMagic, path); !s.ok()) return s;
  } else {
    char magic[kMagic.size()];
    absl::StatusOr<size_t> got =
        ReadAt(fd.get(), 0, kMagic.size(), magic, path);
    if (!got.ok()) return got.status();
    if (absl::string_view(magic, kMagic.size()) != kMagic) {
      return absl::DataLossError(
          absl::StrCat(path, " is not an sdgd event log"));
    }
    absl::StatusOr<log_format::WholeRecords> scanned =
        ScanFile(fd.get(), size, path, replay);
    if (!scanned.ok()) return scanned.status();
    whole = *scanned;
    if (whole.end < size) {
      Log(LogLevel::kWarning, "event log: cut a torn tail",
          {{"path", path},
           {"bytes", size - whole.end},
           {"last_sequence", whole.last_sequence}});
      if (::ftruncate(fd.get(), whole.end) != 0) {
        return FileError("truncate", path, errno);
      }
    }
  }
  if (::fdatasync(fd.get()) != 0) return FileError("fsync", path, errno);
  std::shared_ptr<FileEventLog> log(
      new FileEventLog(std::move(path), &committer, std::move(fd)));
  absl::MutexLock lock(&log->mu_);
  log->progress_ = LogProgress(whole.last_sequence);
  log->committed_bytes_ = whole.end;
  return log;
}

std::shared_ptr<EventLog> FileEventLog::OpenFinished(std::string path) {
  std::shared_ptr<FileEventLog> log(
      new FileEventLog(std::move(path), nullptr, UniqueFd()));
  absl::MutexLock lock(&log->mu_);
  (void)log->progress_.End(absl::OkStatus());  // no one waits yet
  log->scanned_ = false;                       // by the first Read
  return log;
}

absl::Status FileEventLog::ScanFinishedLocked() {
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("open", path_, errno);
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  absl::StatusOr<log_format::WholeRecords> whole =
      ScanFile(fd.get(), size, path_, [](const LogEvent&) {});
  if (!whole.ok()) return whole.status();
  progress_ = LogProgress(whole->last_sequence);
  (void)progress_.End(absl::OkStatus());  // a finished log has no waiters
  committed_bytes_ = whole->end;
  scanned_ = true;
  return absl::OkStatus();
}

uint64_t FileEventLog::AppendGroup(absl::Span<LogEvent> group) {
  uint64_t sequence = 0;
  bool enqueue = false;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < group.size(); ++i) {
      sequence = progress_.Append();
      group[i].set_sequence(sequence);
      log_format::AppendRecord(sequence, group[i].SerializeAsString(),
                               i + 1 < group.size(), pending_);
    }
    enqueue = !std::exchange(queued_, true);
  }
  if (enqueue) committer_->Enqueue(shared_from_this());
  return sequence;
}

void FileEventLog::AwaitRoom() {
  absl::MutexLock lock(&mu_);
  auto has_room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return pending_.size() <= kMaxUncommittedBytes ||
           !progress_.commit_error().ok();
  };
  mu_.Await(absl::Condition(&has_room));
}

FileEventLog::Pending FileEventLog::TakePending() {
  absl::MutexLock lock(&mu_);
  queued_ = false;
  return Pending{std::exchange(pending_, {}), progress_.appended()};
}

void FileEventLog::Committed(const Pending& pending,
                             const absl::Status& status) {
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    committed_bytes_ += static_cast<int64_t>(pending.bytes.size());
  }
  ReportCommit(pending.last_sequence, status);
}

bool FileEventLog::Retry(const Pending& pending) {
  absl::MutexLock lock(&mu_);
  pending_.insert(0, pending.bytes);
  // An append since TakePending may have queued it again already.
  return !std::exchange(queued_, true);
}

absl::StatusOr<std::unique_ptr<EventLog::Reader>> FileEventLog::Read(
    uint64_t after_sequence) {
  {
    absl::MutexLock lock(&mu_);
    if (!scanned_) {
      if (absl::Status s = ScanFinishedLocked(); !s.ok()) return s;
    }
  }
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("open", path_, errno);
  return std::make_unique<FileReader>(shared_from_this(), after_sequence,
                                      std::move(fd));
}

absl::StatusOr<size_t> FileEventLog::FileReader::ReadCommitted(int64_t offset,
                                                               size_t size,
                                                               int64_t limit,
                                                               char* out) {
  const int64_t end = offset + static_cast<int64_t>(size);
  if (offset < read_ahead_start_ ||
      end > read_ahead_start_ + static_cast<int64_t>(read_ahead_.size())) {
    // Committed bytes do not change: what was read ahead stays valid.
    const size_t chunk = static_cast<size_t>(
        std::max<int64_t>(
            end, std::min(limit, offset + static_cast<int64_t>(kReadAhead))) -
        offset);
    read_ahead_.resize(chunk);
    absl::StatusOr<size_t> got =
        ReadAt(fd_.get(), offset, chunk, read_ahead_.data(), log_->path_);
    if (!got.ok()) return got.status();
    read_ahead_.resize(*got);
    read_ahead_start_ = offset;
  }
  const int64_t available =
      read_ahead_start_ + static_cast<int64_t>(read_ahead_.size()) - offset;
  const size_t n = static_cast<size_t>(
      std::clamp<int64_t>(available, 0, static_cast<int64_t>(size)));
  std::memcpy(out, read_ahead_.data() + (offset - read_ahead_start_), n);
  return n;
}

absl::StatusOr<std::optional<EventLog::EncodedEvent>>
FileEventLog::FileReader::Next() {
  int64_t limit;
  {
    absl::MutexLock lock(&log_->mu_);
    limit = log_->committed_bytes_;
  }
  auto read = [this, limit](int64_t offset, size_t n, char* out) {
    return ReadCommitted(offset, n, limit, out);
  };
  while (position_ < limit) {
    absl::StatusOr<std::optional<log_format::Record>> record =
        log_format::ReadRecord(position_, limit, read);
    if (!record.ok()) return record.status();
    if (!record->has_value()) {
      return absl::DataLossError(absl::StrCat(
          log_->path_, " is damaged at byte ", position_,
          "; the job's events after sequence ", last_read_, " are lost"));
    }
    position_ = (*record)->end;
    const uint64_t sequence = (*record)->sequence;
    if (sequence <= after_) continue;
    if (sequence != last_read_ + 1) {
      return absl::DataLossError(absl::StrCat(
          log_->path_, " is damaged: event ", sequence, " follows event ",
          last_read_, " (was the state_dir used by two servers?)"));
    }
    last_read_ = sequence;
    EncodedEvent event;
    event.sequence = sequence;
    event.event_case = log_format::EventCaseOf((*record)->payload);
    event.bytes = std::move((*record)->payload);
    return event;
  }
  return std::nullopt;
}

LogCommitter::LogCommitter(Options options)
    : schedule_(std::move(options), "event log"), thread_([this] { Loop(); }) {}

LogCommitter::~LogCommitter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

int64_t LogCommitter::rounds() const {
  absl::MutexLock lock(&mu_);
  return rounds_;
}

bool LogCommitter::up() const { return schedule_.up(); }

void LogCommitter::Enqueue(std::shared_ptr<FileEventLog> log) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(log));
}

void LogCommitter::Loop() {
  absl::Time next_round = absl::InfinitePast();
  while (true) {
    std::vector<std::shared_ptr<FileEventLog>> logs;
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
    std::vector<std::shared_ptr<FileEventLog>> retry =
        CommitRound(logs, last_try, error);
    {
      absl::MutexLock lock(&mu_);
      for (auto& log : retry) queue_.push_back(std::move(log));
    }
    next_round = schedule_.AfterRound(error);
  }
}

std::vector<std::shared_ptr<FileEventLog>> LogCommitter::CommitRound(
    const std::vector<std::shared_ptr<FileEventLog>>& logs, bool last_try,
    absl::Status& error) {
  // Every write first, then every fdatasync: the disk sees the round's
  // writes together.
  std::vector<FileEventLog::Pending> pending;
  std::vector<absl::Status> results;
  pending.reserve(logs.size());
  results.reserve(logs.size());
  for (const auto& log : logs) {
    pending.push_back(log->TakePending());
    results.push_back(
        WriteAll(log->fd_.get(), pending.back().bytes, log->path_));
  }
  std::vector<std::shared_ptr<FileEventLog>> retry;
  for (size_t i = 0; i < logs.size(); ++i) {
    FileEventLog& log = *logs[i];
    if (results[i].ok() && ::fdatasync(log.fd_.get()) != 0) {
      results[i] = FileError("fsync", log.path_, errno);
    }
    if (results[i].ok()) {
      log.Committed(pending[i], results[i]);
      continue;
    }
    // Cut what may have reached the file, so that it ends on a whole
    // record; a crash before this leaves a torn tail, cut on open.
    int64_t committed;
    {
      absl::MutexLock lock(&log.mu_);
      committed = log.committed_bytes_;
    }
    (void)::ftruncate(log.fd_.get(), committed);
    if (error.ok()) error = results[i];
    if (last_try || schedule_.options().max_outage <= absl::ZeroDuration()) {
      Log(LogLevel::kError, "event log: commit failed",
          {{"path", log.path_}, {"error", std::string(results[i].message())}});
      log.Committed(pending[i], results[i]);
    } else {
      if (log.Retry(pending[i])) retry.push_back(logs[i]);
    }
  }
  return retry;
}

}  // namespace sdg
