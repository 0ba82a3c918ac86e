#include "server/store/event_log.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace sdg {
namespace {

constexpr char kMagic[] = "SDGLOG1\n";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;
constexpr size_t kHeaderSize = 16;
// A record larger than this is not one we wrote.
constexpr uint32_t kMaxPayload = 1u << 30;
// Set in a record's size word: the next record belongs to the same group.
constexpr uint32_t kGroupContinues = 1u << 31;

uint32_t RecordCrc(uint64_t sequence_le, absl::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(&sequence_le),
              sizeof(sequence_le));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data()),
              static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

void AppendRecord(uint64_t sequence, absl::string_view payload,
                  bool group_continues, std::string& out) {
  const uint64_t sequence_le = htole64(sequence);
  const uint32_t size_le = htole32(static_cast<uint32_t>(payload.size()) |
                                   (group_continues ? kGroupContinues : 0));
  const uint32_t crc_le = htole32(RecordCrc(sequence_le, payload));
  out.append(reinterpret_cast<const char*>(&size_le), 4);
  out.append(reinterpret_cast<const char*>(&crc_le), 4);
  out.append(reinterpret_cast<const char*>(&sequence_le), 8);
  out.append(payload.data(), payload.size());
}

struct Header {
  uint32_t size;
  uint32_t crc;
  uint64_t sequence_le;
  bool group_continues;
};

Header DecodeHeader(const char* bytes) {
  Header header;
  std::memcpy(&header.size, bytes, 4);
  std::memcpy(&header.crc, bytes + 4, 4);
  std::memcpy(&header.sequence_le, bytes + 8, 8);
  header.size = le32toh(header.size);
  header.group_continues = (header.size & kGroupContinues) != 0;
  header.size &= ~kGroupContinues;
  header.crc = le32toh(header.crc);
  return header;
}

struct Record {
  uint64_t sequence;
  std::string payload;  // a serialized sdg.v1.JobEvent, its CRC checked
  int64_t end;          // the offset after it
  bool group_continues;
};

// Reads the record at `offset` through `read`; nullopt for a torn or
// damaged record (short, oversized, bad CRC).
template <typename ReadFn>
absl::StatusOr<std::optional<Record>> ReadRecord(int64_t offset, int64_t limit,
                                                 ReadFn read) {
  if (offset + static_cast<int64_t>(kHeaderSize) > limit) return std::nullopt;
  char header_bytes[kHeaderSize];
  absl::StatusOr<size_t> got = read(offset, kHeaderSize, header_bytes);
  if (!got.ok()) return got.status();
  if (*got != kHeaderSize) return std::nullopt;
  Header header = DecodeHeader(header_bytes);
  const int64_t end = offset + static_cast<int64_t>(kHeaderSize) + header.size;
  if (header.size > kMaxPayload || end > limit) return std::nullopt;
  std::string payload(header.size, '\0');
  got = read(offset + static_cast<int64_t>(kHeaderSize), header.size,
             payload.data());
  if (!got.ok()) return got.status();
  if (*got != header.size ||
      RecordCrc(header.sequence_le, payload) != header.crc) {
    return std::nullopt;
  }
  return Record{le64toh(header.sequence_le), std::move(payload), end,
                header.group_continues};
}

// The oneof case of a serialized JobEvent, from its top-level field tags;
// EVENT_NOT_SET if it has none or the bytes do not parse that far.
v1::JobEvent::EventCase EventCaseOf(absl::string_view payload) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream input(
      reinterpret_cast<const uint8_t*>(payload.data()),
      static_cast<int>(payload.size()));
  static const google::protobuf::OneofDescriptor* const kEvent =
      v1::JobEvent::descriptor()->FindOneofByName("event");
  v1::JobEvent::EventCase found = v1::JobEvent::EVENT_NOT_SET;
  while (const uint32_t tag = input.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    for (int i = 0; i < kEvent->field_count(); ++i) {
      // A oneof case's value is its field's number.
      if (kEvent->field(i)->number() == field) {
        found = static_cast<v1::JobEvent::EventCase>(field);
      }
    }
    if (!WireFormatLite::SkipField(&input, tag)) break;
  }
  return found;
}

// Where the whole groups of records of a log file end: reads every record
// in sequence from the first, handing each group to `replay` once it is
// whole, and stops at the first record that is torn, damaged or out of
// sequence (the records of its group before it are left out too).
struct WholeRecords {
  int64_t end = static_cast<int64_t>(kMagicSize);
  uint64_t last_sequence = 0;
};
absl::StatusOr<WholeRecords> ScanWholeRecords(
    int fd, int64_t size, const std::string& path,
    absl::FunctionRef<void(const v1::JobEvent&)> replay) {
  WholeRecords whole;
  auto read = [&](int64_t offset, size_t n, char* out) {
    return ReadAt(fd, offset, n, out, path);
  };
  std::vector<v1::JobEvent> group;
  int64_t position = whole.end;
  while (true) {
    auto record = ReadRecord(position, size, read);
    if (!record.ok()) return record.status();
    const uint64_t expected = whole.last_sequence + group.size() + 1;
    v1::JobEvent event;
    if (!record->has_value() || (*record)->sequence != expected ||
        !event.ParseFromString((*record)->payload) ||
        event.sequence() != expected) {
      return whole;
    }
    position = (*record)->end;
    group.push_back(std::move(event));
    if ((*record)->group_continues) continue;
    for (const v1::JobEvent& event : group) replay(event);
    whole.last_sequence = group.back().sequence();
    whole.end = position;
    group.clear();
  }
}

}  // namespace

EventLog::EventLog(std::string path, LogCommitter* committer, UniqueFd fd)
    : path_(std::move(path)), committer_(committer), fd_(std::move(fd)) {}

std::shared_ptr<EventLog> EventLog::InMemory() {
  std::shared_ptr<EventLog> log(new EventLog("", nullptr, UniqueFd()));
  absl::MutexLock lock(&log->mu_);
  log->memory_ = kMagic;
  log->committed_bytes_ = static_cast<int64_t>(kMagicSize);
  return log;
}

absl::StatusOr<std::shared_ptr<EventLog>> EventLog::OpenFile(
    std::string path, LogCommitter& committer,
    absl::FunctionRef<void(const v1::JobEvent&)> replay) {
  UniqueFd fd(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (fd.get() < 0) return FileError("open", path, errno);
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return FileError("seek", path, errno);
  int64_t end = static_cast<int64_t>(kMagicSize);
  uint64_t sequence = 0;
  if (size < static_cast<off_t>(kMagicSize)) {
    // New, or torn before its first record: start it again.
    if (size > 0 && ::ftruncate(fd.get(), 0) != 0) {
      return FileError("truncate", path, errno);
    }
    if (absl::Status s = WriteAll(fd.get(), kMagic, path); !s.ok()) return s;
  } else {
    char magic[kMagicSize];
    absl::StatusOr<size_t> got = ReadAt(fd.get(), 0, kMagicSize, magic, path);
    if (!got.ok()) return got.status();
    if (std::memcmp(magic, kMagic, kMagicSize) != 0) {
      return absl::DataLossError(
          absl::StrCat(path, " is not an sdgd event log"));
    }
    absl::StatusOr<WholeRecords> whole =
        ScanWholeRecords(fd.get(), size, path, replay);
    if (!whole.ok()) return whole.status();
    end = whole->end;
    sequence = whole->last_sequence;
    if (end < size) {
      Log(LogLevel::kWarning, "event log: cut a torn tail",
          {{"path", path}, {"bytes", size - end}, {"last_sequence", sequence}});
      if (::ftruncate(fd.get(), end) != 0) {
        return FileError("truncate", path, errno);
      }
    }
  }
  if (::fdatasync(fd.get()) != 0) return FileError("fsync", path, errno);
  std::shared_ptr<EventLog> log(
      new EventLog(std::move(path), &committer, std::move(fd)));
  absl::MutexLock lock(&log->mu_);
  log->appended_ = log->committed_ = sequence;
  log->committed_bytes_ = end;
  return log;
}

std::shared_ptr<EventLog> EventLog::OpenFinished(std::string path) {
  std::shared_ptr<EventLog> log(
      new EventLog(std::move(path), nullptr, UniqueFd()));
  absl::MutexLock lock(&log->mu_);
  log->end_ = absl::OkStatus();
  log->scanned_ = false;  // by the first Read
  return log;
}

absl::Status EventLog::ScanFinishedLocked() {
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("open", path_, errno);
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  absl::StatusOr<WholeRecords> whole =
      ScanWholeRecords(fd.get(), size, path_, [](const v1::JobEvent&) {});
  if (!whole.ok()) return whole.status();
  appended_ = committed_ = whole->last_sequence;
  committed_bytes_ = whole->end;
  scanned_ = true;
  return absl::OkStatus();
}

uint64_t EventLog::Append(v1::JobEvent& event) {
  return AppendGroup(absl::MakeSpan(&event, 1));
}

uint64_t EventLog::AppendGroup(absl::Span<v1::JobEvent> group) {
  std::vector<std::function<void()>> waiters;
  uint64_t sequence = 0;
  bool enqueue = false;
  {
    absl::MutexLock lock(&mu_);
    std::string& out = committer_ == nullptr ? memory_ : pending_;
    for (size_t i = 0; i < group.size(); ++i) {
      sequence = ++appended_;
      group[i].set_sequence(sequence);
      AppendRecord(sequence, group[i].SerializeAsString(), i + 1 < group.size(),
                   out);
    }
    if (committer_ == nullptr) {
      committed_ = sequence;
      committed_bytes_ = static_cast<int64_t>(memory_.size());
      waiters = TakeWaitersLocked();
    } else {
      enqueue = !std::exchange(queued_, true);
    }
  }
  if (enqueue) committer_->Enqueue(shared_from_this());
  for (auto& waiter : waiters) waiter();
  return sequence;
}

void EventLog::AwaitRoom() {
  absl::MutexLock lock(&mu_);
  auto has_room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return pending_.size() <= kMaxUncommittedBytes || !commit_error_.ok();
  };
  mu_.Await(absl::Condition(&has_room));
}

void EventLog::End(absl::Status status) {
  std::vector<std::function<void()>> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (end_.has_value()) return;
    end_ = std::move(status);
    if (committed_ == appended_) waiters = TakeWaitersLocked();
  }
  for (auto& waiter : waiters) waiter();
}

void EventLog::AwaitCommitted() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return committed_ == appended_ || !commit_error_.ok();
  };
  mu_.Await(absl::Condition(&done));
}

void EventLog::SetOnCommitError(std::function<void(absl::Status)> callback) {
  absl::MutexLock lock(&mu_);
  on_commit_error_ = std::move(callback);
}

uint64_t EventLog::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return committed_;
}

absl::Status EventLog::commit_error() const {
  absl::MutexLock lock(&mu_);
  return commit_error_;
}

std::vector<std::function<void()>> EventLog::TakeWaitersLocked() {
  return std::exchange(waiters_, {});
}

EventLog::Pending EventLog::TakePending() {
  absl::MutexLock lock(&mu_);
  queued_ = false;
  return Pending{std::exchange(pending_, {}), appended_};
}

void EventLog::Committed(const Pending& pending, const absl::Status& status) {
  std::vector<std::function<void()>> waiters;
  std::function<void(absl::Status)> on_error;
  {
    absl::MutexLock lock(&mu_);
    if (!commit_error_.ok()) return;
    if (status.ok()) {
      committed_ = pending.last_sequence;
      committed_bytes_ += static_cast<int64_t>(pending.bytes.size());
    } else {
      commit_error_ = status;
      on_error = on_commit_error_;
    }
    waiters = TakeWaitersLocked();
  }
  for (auto& waiter : waiters) waiter();
  if (on_error) on_error(status);
}

bool EventLog::NotifyAfter(uint64_t sequence, std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  if (committed_ > sequence || !commit_error_.ok() ||
      (end_.has_value() && committed_ == appended_)) {
    return false;
  }
  waiters_.push_back(std::move(callback));
  return true;
}

absl::StatusOr<std::unique_ptr<EventLog::Reader>> EventLog::Read(
    uint64_t after_sequence) {
  {
    absl::MutexLock lock(&mu_);
    if (!scanned_) {
      if (absl::Status s = ScanFinishedLocked(); !s.ok()) return s;
    }
  }
  UniqueFd fd;
  if (!path_.empty()) {
    fd = UniqueFd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return FileError("open", path_, errno);
  }
  std::unique_ptr<Reader> reader(
      new Reader(shared_from_this(), after_sequence, std::move(fd)));
  reader->position_ = static_cast<int64_t>(kMagicSize);
  return reader;
}

absl::StatusOr<size_t> EventLog::Reader::Read(int64_t offset, size_t size,
                                              int64_t limit, char* out) {
  if (fd_.get() < 0) {
    absl::MutexLock lock(&log_->mu_);
    const std::string& bytes = log_->memory_;
    if (offset >= static_cast<int64_t>(bytes.size())) return 0;
    size_t n = std::min(size, bytes.size() - static_cast<size_t>(offset));
    std::copy_n(bytes.data() + offset, n, out);
    return n;
  }
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

absl::StatusOr<std::optional<EventLog::EncodedEvent>> EventLog::Reader::Next() {
  int64_t limit;
  {
    absl::MutexLock lock(&log_->mu_);
    limit = log_->committed_bytes_;
  }
  auto read = [this, limit](int64_t offset, size_t n, char* out) {
    return Read(offset, n, limit, out);
  };
  while (position_ < limit) {
    auto record = ReadRecord(position_, limit, read);
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
    event.event_case = EventCaseOf((*record)->payload);
    event.bytes = std::move((*record)->payload);
    return event;
  }
  return std::nullopt;
}

std::optional<absl::Status> EventLog::Reader::End() const {
  absl::MutexLock lock(&log_->mu_);
  if (last_read_ < log_->committed_) return std::nullopt;
  if (!log_->commit_error_.ok()) return log_->commit_error_;
  if (log_->end_.has_value() && log_->committed_ == log_->appended_) {
    return *log_->end_;
  }
  return std::nullopt;
}

LogCommitter::LogCommitter(absl::Duration min_round_interval)
    : min_round_interval_(min_round_interval), thread_([this] { Loop(); }) {}

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

void LogCommitter::Enqueue(std::shared_ptr<EventLog> log) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(log));
}

void LogCommitter::Loop() {
  absl::Time next_round = absl::InfinitePast();
  while (true) {
    std::vector<std::shared_ptr<EventLog>> logs;
    {
      absl::MutexLock lock(&mu_);
      // Appends gather meanwhile; stopping commits at once.
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), next_round);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      next_round = absl::Now() + min_round_interval_;
      if (queue_.empty()) return;  // stopping, and everything is committed
      logs.swap(queue_);
      ++rounds_;
    }
    std::vector<EventLog::Pending> pending;
    std::vector<absl::Status> results;
    pending.reserve(logs.size());
    for (const auto& log : logs) {
      pending.push_back(log->TakePending());
      absl::Status status =
          WriteAll(log->fd_.get(), pending.back().bytes, log->path_);
      results.push_back(std::move(status));
    }
    for (size_t i = 0; i < logs.size(); ++i) {
      EventLog& log = *logs[i];
      if (results[i].ok() && ::fdatasync(log.fd_.get()) != 0) {
        results[i] = FileError("fsync", log.path_, errno);
      }
      if (!results[i].ok()) {
        // Cut what may have reached the file, so that it ends on a whole
        // record; a crash before this leaves a torn tail, cut on open.
        int64_t committed;
        {
          absl::MutexLock lock(&log.mu_);
          committed = log.committed_bytes_;
        }
        (void)::ftruncate(log.fd_.get(), committed);
        Log(LogLevel::kError, "event log: commit failed",
            {{"path", log.path_},
             {"error", std::string(results[i].message())}});
      }
      log.Committed(pending[i], results[i]);
    }
  }
}

}  // namespace sdg
