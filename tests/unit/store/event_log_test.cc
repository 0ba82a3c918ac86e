// The event log on its own: what a reader sees is what was committed, in
// order; a reopened file gives back every whole record and cuts a torn tail;
// a file that cannot be written says so and names it.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/synchronization/notification.h"
#include "server/store/file_event_log.h"
#include "server/store/memory_event_log.h"
#include "tests/testing/store_test_data.h"
#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ResultOfShard;

// Every event a new reader gets after `after`, and how the log ends for it.
std::vector<uint64_t> SequencesAfter(EventLog& log, uint64_t after) {
  std::vector<uint64_t> sequences;
  auto reader = log.Read(after);
  EXPECT_TRUE(reader.ok()) << reader.status();
  while (true) {
    auto next = (*reader)->Next();
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) break;
    sequences.push_back((*next)->sequence);
  }
  return sequences;
}

std::vector<int64_t> ReplayShards(const std::string& path,
                                  LogCommitter& committer,
                                  std::shared_ptr<EventLog>* out = nullptr) {
  std::vector<int64_t> shards;
  auto log = FileEventLog::Open(path, committer, [&](const LogEvent& e) {
    shards.push_back(e.shard_result().shard_index());
  });
  EXPECT_TRUE(log.ok()) << log.status();
  if (out != nullptr && log.ok()) *out = *log;
  return shards;
}

class EventLogTest : public ::testing::Test {
 protected:
  // Opens the file log, commits `count` shard results and, if `end`, the
  // log's end; returns the log (still open).
  std::shared_ptr<EventLog> WriteShards(LogCommitter& committer, int count,
                                        bool end = false) {
    std::shared_ptr<EventLog> log;
    ReplayShards(path_, committer, &log);
    for (int i = 0; i < count; ++i) {
      LogEvent event = ResultOfShard(i);
      log->Append(event);
    }
    if (end) log->End(absl::OkStatus());
    log->AwaitCommitted();
    return log;
  }

  std::string path_ = testing::MakeTempDir() + "/events.log";
};

TEST_F(EventLogTest, MemoryLogNumbersEventsAndReadsThemInOrder) {
  auto log = MemoryEventLog::Create();
  for (int i = 0; i < 3; ++i) {
    LogEvent event = ResultOfShard(i);
    EXPECT_EQ(log->Append(event), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(event.sequence(), static_cast<uint64_t>(i + 1));
  }
  EXPECT_THAT(SequencesAfter(*log, 0), ElementsAre(1, 2, 3));
  EXPECT_THAT(SequencesAfter(*log, 2), ElementsAre(3));
  EXPECT_THAT(SequencesAfter(*log, 3), ElementsAre());
}

TEST_F(EventLogTest, ReaderEndsOnlyOnceTheEndIsCommittedAndRead) {
  auto log = MemoryEventLog::Create();
  LogEvent event = ResultOfShard(0);
  log->Append(event);
  auto reader = *log->Read(0);
  EXPECT_EQ(reader->End(), std::nullopt);  // more may come
  log->End(absl::OkStatus());
  EXPECT_EQ(reader->End(), std::nullopt);  // one event still to read
  ASSERT_TRUE((*reader->Next()).has_value());
  EXPECT_EQ(reader->End(), absl::OkStatus());
}

TEST_F(EventLogTest, NotifyAfterRunsOnTheNextCommitNotBefore) {
  auto log = MemoryEventLog::Create();
  int calls = 0;
  EXPECT_TRUE(log->NotifyAfter(0, [&] { ++calls; }));
  EXPECT_EQ(calls, 0);
  LogEvent event = ResultOfShard(0);
  log->Append(event);
  EXPECT_EQ(calls, 1);
  // Already committed after 0: nothing to wait for.
  EXPECT_FALSE(log->NotifyAfter(0, [&] { ++calls; }));
  EXPECT_EQ(calls, 1);
}

TEST_F(EventLogTest, FileLogIsReadBackOnlyOnceCommitted) {
  LogCommitter committer;
  std::shared_ptr<EventLog> log;
  EXPECT_THAT(ReplayShards(path_, committer, &log), ElementsAre());
  for (int i = 0; i < 50; ++i) {
    LogEvent event = ResultOfShard(i);
    log->Append(event);
  }
  log->AwaitCommitted();
  EXPECT_EQ(log->last_sequence(), 50u);
  EXPECT_EQ(SequencesAfter(*log, 45).size(), 5u);
  // Group commit: 50 appends in far fewer rounds is likely but not certain
  // on a loaded machine, so only the upper bound is asserted.
  EXPECT_LE(committer.rounds(), 50);
  log.reset();

  std::vector<int64_t> replayed = ReplayShards(path_, committer, &log);
  ASSERT_EQ(replayed.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(replayed[i], i);
  // Appends go on after the last sequence.
  LogEvent event = ResultOfShard(50);
  EXPECT_EQ(log->Append(event), 51u);
}

TEST_F(EventLogTest, TornTailIsCutAndNotParsed) {
  LogCommitter committer;
  WriteShards(committer, 3);
  const auto whole = std::filesystem::file_size(path_);
  {
    // A crash mid-write: the first 20 bytes of a fourth record.
    LogEvent event = ResultOfShard(3);
    event.set_sequence(4);
    std::string payload = event.SerializeAsString();
    std::string partial(16, '\x01');
    partial += payload.substr(0, 4);
    std::ofstream(path_, std::ios::app | std::ios::binary) << partial;
  }
  EXPECT_EQ(std::filesystem::file_size(path_), whole + 20);
  std::shared_ptr<EventLog> log;
  EXPECT_THAT(ReplayShards(path_, committer, &log), ElementsAre(0, 1, 2));
  EXPECT_EQ(std::filesystem::file_size(path_), whole);
  LogEvent event = ResultOfShard(3);
  EXPECT_EQ(log->Append(event), 4u);
  log->AwaitCommitted();
  EXPECT_THAT(SequencesAfter(*log, 0), ElementsAre(1, 2, 3, 4));
}

TEST_F(EventLogTest, AGroupIsReadWholeAndAGroupTornMidwayIsCutWhole) {
  LogCommitter committer;
  std::shared_ptr<EventLog> log = WriteShards(committer, 1);
  const auto before_group = std::filesystem::file_size(path_);
  std::vector<LogEvent> group = {ResultOfShard(1), ResultOfShard(1),
                                 ResultOfShard(1)};
  EXPECT_EQ(log->AppendGroup(absl::MakeSpan(group)), 4u);
  log->AwaitCommitted();
  EXPECT_THAT(SequencesAfter(*log, 0), ElementsAre(1, 2, 3, 4));
  const auto after_group = std::filesystem::file_size(path_);
  log.reset();
  // A crash after the group's second record reached the disk: its first
  // two records are whole, but the group is not.
  const auto third_record = group[2].ByteSizeLong() + 16;
  std::filesystem::resize_file(path_, after_group - third_record);
  EXPECT_THAT(ReplayShards(path_, committer, &log), ElementsAre(0));
  EXPECT_EQ(std::filesystem::file_size(path_), before_group);
  LogEvent event = ResultOfShard(1);
  EXPECT_EQ(log->Append(event), 2u);
}

TEST_F(EventLogTest, FlippedByteEndsTheLogThere) {
  LogCommitter committer;
  WriteShards(committer, 3);
  // Damage the last record's payload: its CRC no longer matches.
  const auto size = std::filesystem::file_size(path_);
  {
    std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size) - 2);
    file.put('\xff');
  }
  EXPECT_THAT(ReplayShards(path_, committer), ElementsAre(0, 1));
}

TEST_F(EventLogTest, FinishedLogIsReadToItsEnd) {
  LogCommitter committer;
  WriteShards(committer, 4, /*end=*/true);
  auto finished = FileEventLog::OpenFinished(path_);
  auto reader = *finished->Read(1);
  int read = 0;
  while ((*reader->Next()).has_value()) ++read;
  EXPECT_EQ(read, 3);
  EXPECT_EQ(reader->End(), absl::OkStatus());
  EXPECT_EQ(finished->last_sequence(), 4u);
}

// A committer that fails a log at its first failed commit.
LogCommitter::Options NoRetry() {
  LogCommitter::Options options;
  options.max_outage = absl::ZeroDuration();
  return options;
}

// A shard result of about 1 kB.
LogEvent BigResult(int64_t shard) {
  LogEvent big = ResultOfShard(shard);
  (*big.mutable_shard_result()
        ->mutable_rows(0)
        ->mutable_columns()
        ->mutable_fields())["output"]
      .set_string_value(std::string(1000, 'y'));
  return big;
}

// While set, no file of this process may grow past `bytes` (a full disk,
// as a commit sees it: EFBIG part way through a write).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(uintmax_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &original_), 0);
    rlimit small = original_;
    small.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  ~FileSizeLimit() { Lift(); }
  void Lift() {
    if (lifted_) return;
    lifted_ = true;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &original_), 0);
  }

 private:
  rlimit original_{};
  bool lifted_ = false;
};

TEST_F(EventLogTest, AFailedCommitLeavesWhatWasCommittedIntact) {
  LogCommitter committer(NoRetry());
  std::shared_ptr<EventLog> log = WriteShards(committer, 3);
  const auto committed_size = std::filesystem::file_size(path_);

  // The file may not grow past 100 more bytes: the next commit fails part
  // way, as on a full disk.
  FileSizeLimit limit(committed_size + 100);
  absl::Notification failed;
  absl::Status error;
  log->SetOnCommitError([&](absl::Status status) {
    error = status;
    failed.Notify();
  });
  LogEvent big = BigResult(3);
  log->Append(big);
  failed.WaitForNotification();
  log->AwaitCommitted();  // returns: committing has failed
  limit.Lift();

  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(error.message(), HasSubstr(path_));
  EXPECT_EQ(log->last_sequence(), 3u);
  // Cut back to the last whole record: nothing committed is damaged.
  EXPECT_EQ(std::filesystem::file_size(path_), committed_size);
  auto reader = *log->Read(0);
  int read = 0;
  while ((*reader->Next()).has_value()) ++read;
  EXPECT_EQ(read, 3);
  EXPECT_EQ(reader->End()->code(), absl::StatusCode::kResourceExhausted);
  log.reset();
  EXPECT_THAT(ReplayShards(path_, committer), ElementsAre(0, 1, 2));
}

TEST_F(EventLogTest, ACommitThatFailsIsRetriedUntilTheDiskHasRoomAgain) {
  absl::Notification down, up;
  absl::Status reported;
  LogCommitter::Options options;
  options.retry_backoff = absl::Milliseconds(1);
  options.max_retry_backoff = absl::Milliseconds(20);
  options.on_health = [&](bool is_up, const absl::Status& error) {
    if (is_up) {
      up.Notify();
    } else {
      reported = error;
      down.Notify();
    }
  };
  LogCommitter committer(options);
  std::shared_ptr<EventLog> log = WriteShards(committer, 3);
  const auto committed_size = std::filesystem::file_size(path_);
  bool log_failed = false;
  log->SetOnCommitError([&](absl::Status) { log_failed = true; });

  FileSizeLimit limit(committed_size + 100);
  LogEvent big = BigResult(3);
  log->Append(big);
  down.WaitForNotification();
  EXPECT_FALSE(committer.up());
  EXPECT_EQ(reported.code(), absl::StatusCode::kResourceExhausted);
  // Appended while the disk is full: kept, and committed after the first.
  LogEvent next = ResultOfShard(4);
  log->Append(next);
  // Nothing uncommitted is read, and the file holds only whole records.
  EXPECT_EQ(log->last_sequence(), 3u);
  EXPECT_THAT(SequencesAfter(*log, 0), ElementsAre(1, 2, 3));
  EXPECT_EQ(std::filesystem::file_size(path_), committed_size);

  limit.Lift();  // room again
  up.WaitForNotification();
  log->AwaitCommitted();
  EXPECT_TRUE(committer.up());
  EXPECT_TRUE(log->commit_error().ok()) << log->commit_error();
  EXPECT_FALSE(log_failed);
  EXPECT_EQ(log->last_sequence(), 5u);
  EXPECT_THAT(SequencesAfter(*log, 0), ElementsAre(1, 2, 3, 4, 5));
  log.reset();
  EXPECT_THAT(ReplayShards(path_, committer), ElementsAre(0, 1, 2, 3, 4));
}

TEST_F(EventLogTest, CommitsFailingPastTheOutageLimitFailTheLog) {
  LogCommitter::Options options;
  options.retry_backoff = absl::Milliseconds(1);
  options.max_retry_backoff = absl::Milliseconds(1);
  options.max_outage = absl::Milliseconds(20);
  LogCommitter committer(options);
  std::shared_ptr<EventLog> log = WriteShards(committer, 1);
  FileSizeLimit limit(std::filesystem::file_size(path_) + 100);
  absl::Notification failed;
  log->SetOnCommitError([&](absl::Status) { failed.Notify(); });
  LogEvent big = BigResult(1);
  log->Append(big);
  failed.WaitForNotification();  // retried until the limit, then failed
  log->AwaitCommitted();
  EXPECT_EQ(log->commit_error().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(log->last_sequence(), 1u);
}

TEST_F(EventLogTest, AReaderGetsEachEventAsAppendedWithItsCase) {
  auto log = MemoryEventLog::Create();
  LogEvent result = ResultOfShard(7);
  log->Append(result);
  LogEvent stage_rows;
  stage_rows.set_job_id("j");
  stage_rows.mutable_stage_rows()->set_shard_index(1);
  log->Append(stage_rows);
  auto reader = *log->Read(0);

  auto first = *reader->Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->sequence, 1u);
  EXPECT_EQ(first->event_case, LogEvent::kShardResult);
  LogEvent parsed;
  ASSERT_TRUE(parsed.ParseFromString(first->bytes));
  EXPECT_EQ(parsed.SerializeAsString(), result.SerializeAsString());
  auto second = *reader->Next();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->event_case, LogEvent::kStageRows);
  EXPECT_EQ((*reader->Next()), std::nullopt);
}

TEST_F(EventLogTest, AReaderReadsOnPastWhatItReadAheadAsMoreIsCommitted) {
  LogCommitter committer;
  std::shared_ptr<EventLog> log;
  ReplayShards(path_, committer, &log);
  // Events of about 100 KB: a read-ahead chunk holds two or three.
  auto append = [&](int shard) {
    LogEvent event = ResultOfShard(shard);
    (*event.mutable_shard_result()
          ->mutable_rows(0)
          ->mutable_columns()
          ->mutable_fields())["output"]
        .set_string_value(std::string(100'000, 'a' + shard % 26));
    log->Append(event);
  };
  auto reader = *log->Read(0);
  std::vector<int64_t> shards;
  auto read_all = [&] {
    while (true) {
      auto next = reader->Next();
      ASSERT_TRUE(next.ok()) << next.status();
      if (!next->has_value()) return;
      LogEvent event;
      ASSERT_TRUE(event.ParseFromString((*next)->bytes));
      EXPECT_EQ(
          event.shard_result()
              .rows(0)
              .columns()
              .fields()
              .at("output")
              .string_value(),
          std::string(100'000, 'a' + event.shard_result().shard_index() % 26));
      shards.push_back(event.shard_result().shard_index());
    }
  };
  for (int shard = 0; shard < 5; ++shard) append(shard);
  log->AwaitCommitted();
  read_all();
  for (int shard = 5; shard < 8; ++shard) append(shard);
  log->AwaitCommitted();
  read_all();
  EXPECT_THAT(shards, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST_F(EventLogTest, UnwritableFileIsResourceExhaustedNamingIt) {
  // /dev/full takes the open and refuses every write: a full disk.
  LogCommitter committer;
  auto log = FileEventLog::Open("/dev/full", committer, [](const LogEvent&) {});
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(log.status().message(), HasSubstr("/dev/full"));
}

}  // namespace
}  // namespace sdg
