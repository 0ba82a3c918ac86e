#include "server/service/batch_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "server/jobs/batch_line.h"
#include "server/store/memory_event_log.h"
#include "server/store/memory_job_store.h"
#include "server/store/sqlite_job_store.h"
#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Json = nlohmann::json;

constexpr char kJob[] = "job1";
constexpr int kLines = 4;

class BatchFilesTest : public ::testing::Test {
 protected:
  explicit BatchFilesTest(int lines = kLines) {
    std::unique_ptr<DatasetBuilder> input = DatasetBuilder::InMemory();
    for (int i = 0; i < lines; ++i) {
      EXPECT_TRUE(input
                      ->Add(LineRow(absl::StrCat(
                          R"({"custom_id":"r)", i,
                          R"(","method":"POST","url":"/v1/chat/completions",)",
                          R"("body":{"model":"m"}})")))
                      .ok());
    }
    input_ = *input->Finish();
  }

  std::unique_ptr<BatchFiles> Open(
      DatasetStore& store,
      size_t max_waiting_bytes = BatchFiles::kMaxWaitingBytes) {
    BatchFiles::Batch batch;
    batch.job_id = kJob;
    batch.tenant = "alice";
    auto files =
        BatchFiles::Open(store, batch, input_, log_, max_waiting_bytes);
    EXPECT_TRUE(files.ok()) << files.status();
    return files.ok() ? *std::move(files) : nullptr;
  }

  // The lines answered by one shard's event.
  void Answered(const std::vector<int>& rows) {
    LogEvent event;
    for (int row : rows) {
      v1::ResultRow* result = event.mutable_shard_result()->add_rows();
      result->set_row_index(row);
      auto& columns = *result->mutable_columns()->mutable_fields();
      columns["custom_id"].set_string_value(absl::StrCat("r", row));
      columns["status_code"].set_number_value(200);
      columns["request_id"].set_string_value(absl::StrCat("req-", row));
      columns["body"].set_string_value(absl::StrCat(R"({"reply":)", row, "}"));
    }
    log_->Append(event);
  }
  void Failed(int row, int http_status) {
    LogEvent event;
    v1::ShardError& error = *event.mutable_shard_error();
    error.set_first_row(row);
    error.set_row_count(1);
    error.set_http_status(http_status);
    error.set_message("the backend said no");
    log_->Append(event);
  }
  void Finished(v1::JobState state, std::string reason = "") {
    LogEvent event;
    event.mutable_finished()->set_state(state);
    event.mutable_finished()->set_reason(std::move(reason));
    log_->Append(event);
    log_->End(absl::OkStatus());
  }

  // A stored file's lines, each as JSON.
  static std::vector<Json> Lines(DatasetStore& store,
                                 const std::string& file_id) {
    std::vector<Json> lines;
    auto file = store.OpenUpload(file_id);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return lines;
    auto rows = (*file)->ReadRows(0, (*file)->row_count());
    EXPECT_TRUE(rows.ok()) << rows.status();
    for (const auto& row : *rows) lines.push_back(Json::parse(RowLine(row)));
    return lines;
  }
  static std::vector<std::string> CustomIds(const std::vector<Json>& lines) {
    std::vector<std::string> ids;
    ids.reserve(lines.size());
    for (const Json& line : lines) ids.push_back(line["custom_id"]);
    return ids;
  }

  std::shared_ptr<Dataset> input_;
  std::shared_ptr<EventLog> log_ = MemoryEventLog::Create();
};

TEST_F(BatchFilesTest, LinesAreWrittenInInputOrderAsTheyCommit) {
  MemoryJobStore store;
  std::unique_ptr<BatchFiles> files = Open(store);
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kFollowing);

  Answered({2, 3});  // a later shard first
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kFollowing);
  Answered({0});
  Failed(1, 503);
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kFollowing);
  // Nothing is shown before the end.
  EXPECT_FALSE(store.FindUpload(BatchFiles::OutputFileId(kJob)).ok());

  Finished(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kSaved);
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kSaved);

  const std::vector<Json> output = Lines(store, BatchFiles::OutputFileId(kJob));
  EXPECT_THAT(CustomIds(output), ElementsAre("r0", "r2", "r3"));
  EXPECT_EQ(output[1]["response"]["status_code"], 200);
  EXPECT_EQ(output[1]["response"]["request_id"], "req-2");
  EXPECT_EQ(output[1]["response"]["body"], Json::parse(R"({"reply":2})"));
  const std::vector<Json> errors = Lines(store, BatchFiles::ErrorFileId(kJob));
  EXPECT_THAT(CustomIds(errors), ElementsAre("r1"));
  EXPECT_EQ(errors[0]["response"]["status_code"], 503);

  absl::StatusOr<StoredDataset> stored =
      store.FindUpload(BatchFiles::OutputFileId(kJob));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->dataset.purpose(), "batch_output");
  EXPECT_EQ(stored->dataset.rows(), 3);
  EXPECT_EQ(stored->tenant, "alice");
}

TEST_F(BatchFilesTest, AnEndedLogReadAtOnceGivesTheSameFiles) {
  Answered({2, 3});
  Answered({0});
  Failed(1, 503);
  Finished(v1::JOB_STATE_SUCCEEDED);
  MemoryJobStore followed;
  std::unique_ptr<BatchFiles> files = Open(followed);
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kSaved);

  EXPECT_THAT(CustomIds(Lines(followed, BatchFiles::OutputFileId(kJob))),
              ElementsAre("r0", "r2", "r3"));
  EXPECT_THAT(CustomIds(Lines(followed, BatchFiles::ErrorFileId(kJob))),
              ElementsAre("r1"));
}

TEST_F(BatchFilesTest, ACancelledBatchsUnansweredLinesGoToTheErrorFile) {
  MemoryJobStore store;
  std::unique_ptr<BatchFiles> files = Open(store);
  ASSERT_NE(files, nullptr);
  Answered({0});
  Answered({2});
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kFollowing);
  Finished(v1::JOB_STATE_CANCELLED, "cancelled by the client");
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kSaved);

  EXPECT_THAT(CustomIds(Lines(store, BatchFiles::OutputFileId(kJob))),
              ElementsAre("r0", "r2"));
  const std::vector<Json> errors = Lines(store, BatchFiles::ErrorFileId(kJob));
  EXPECT_THAT(CustomIds(errors), ElementsAre("r1", "r3"));
  EXPECT_EQ(errors[0]["error"]["code"], "batch_cancelled");
  EXPECT_EQ(errors[0]["error"]["message"], "cancelled by the client");
}

TEST_F(BatchFilesTest, ASuspendedJobLeavesNoFilesBehind) {
  const std::string dir = testing::MakeTempDir() + "/state";
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store =
      SqliteJobStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  std::unique_ptr<BatchFiles> files = Open(**store);
  ASSERT_NE(files, nullptr);
  Answered({0, 1});
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kFollowing);
  // What is written so far is on disk.
  EXPECT_TRUE(std::filesystem::exists(dir + "/uploads/" +
                                      BatchFiles::OutputFileId(kJob)));

  log_->End(absl::UnavailableError("suspended"));
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kNone);
  files.reset();
  EXPECT_FALSE((*store)->FindUpload(BatchFiles::OutputFileId(kJob)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/uploads/" +
                                       BatchFiles::OutputFileId(kJob)));
  EXPECT_FALSE(std::filesystem::exists(dir + "/uploads/" +
                                       BatchFiles::ErrorFileId(kJob)));
}

TEST_F(BatchFilesTest, ABatchWhoseLinesFailedValidationHasNoFiles) {
  MemoryJobStore store;
  std::unique_ptr<BatchFiles> files = Open(store);
  ASSERT_NE(files, nullptr);
  LogEvent event;
  event.mutable_finished()->set_state(v1::JOB_STATE_FAILED);
  event.mutable_finished()->add_line_errors()->set_line(2);
  log_->Append(event);
  log_->End(absl::OkStatus());
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kNone);
  files.reset();

  EXPECT_FALSE(store.FindUpload(BatchFiles::OutputFileId(kJob)).ok());
  EXPECT_FALSE(store.FindUpload(BatchFiles::ErrorFileId(kJob)).ok());
  absl::StatusOr<std::vector<StoredDataset>> listed =
      store.ListUploads("alice");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, IsEmpty());
}

// The error file's record is saved before the output file's: a crash in
// between leaves the first without the second, and the batch's files are
// written again when it is next read.
TEST_F(BatchFilesTest, ACrashBetweenTheTwoRecordsIsWrittenAgain) {
  Answered({0, 1, 2});
  Failed(3, 503);
  Finished(v1::JOB_STATE_SUCCEEDED);
  MemoryJobStore store;
  StoredDataset left;
  left.dataset.set_dataset_id(BatchFiles::ErrorFileId(kJob));
  left.dataset.set_purpose("batch_output");
  left.tenant = "alice";
  ASSERT_TRUE(store.SaveUpload(left).ok());

  std::unique_ptr<BatchFiles> files = Open(store);
  ASSERT_NE(files, nullptr);
  absl::StatusOr<BatchFiles::Progress> progress = files->CatchUp();
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(*progress, BatchFiles::Progress::kSaved);
  EXPECT_THAT(CustomIds(Lines(store, BatchFiles::OutputFileId(kJob))),
              ElementsAre("r0", "r1", "r2"));
  EXPECT_THAT(CustomIds(Lines(store, BatchFiles::ErrorFileId(kJob))),
              ElementsAre("r3"));
}

// One slow request holds back every line after it: those wait in memory
// up to a bound, and past it are read from the log again once the slow
// line is in, so a batch of any size is written in bounded memory.
class SlowLineTest : public BatchFilesTest {
 protected:
  static constexpr int kMany = 200;
  SlowLineTest() : BatchFilesTest(kMany) {}

  // Lines 1..kMany-1 committed in `order`, then line 0 (failed); the
  // files' custom_ids, checking the bound after each commit.
  void CommitAllButTheFirstThenIt(const std::vector<int>& order) {
    constexpr size_t kBound = 2000;  // about ten output lines
    MemoryJobStore store;
    std::unique_ptr<BatchFiles> files = Open(store, kBound);
    ASSERT_NE(files, nullptr);
    for (int row : order) {
      Answered({row});
      ASSERT_EQ(*files->CatchUp(), BatchFiles::Progress::kFollowing);
      EXPECT_LE(files->waiting_bytes(), kBound) << "after line " << row;
    }
    Failed(0, 500);
    Finished(v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kSaved);
    EXPECT_GT(files->log_passes(), 0);

    std::vector<std::string> expected;
    for (int i = 1; i < kMany; ++i) expected.push_back(absl::StrCat("r", i));
    EXPECT_EQ(CustomIds(Lines(store, BatchFiles::OutputFileId(kJob))),
              expected);
    EXPECT_THAT(CustomIds(Lines(store, BatchFiles::ErrorFileId(kJob))),
                ElementsAre("r0"));
  }
};

TEST_F(SlowLineTest, LinesAfterASlowOneWaitWithinABoundAndAreReadAgain) {
  std::vector<int> in_order;
  for (int row = 1; row < kMany; ++row) in_order.push_back(row);
  CommitAllButTheFirstThenIt(in_order);
}

TEST_F(SlowLineTest, LinesInReverseOrderAreWrittenInInputOrderToo) {
  std::vector<int> reversed;
  for (int row = kMany - 1; row >= 1; --row) reversed.push_back(row);
  CommitAllButTheFirstThenIt(reversed);
}

TEST_F(SlowLineTest, ACancelledBatchWithLinesLetGoStillNamesEveryLineOnce) {
  constexpr size_t kBound = 2000;
  MemoryJobStore store;
  std::unique_ptr<BatchFiles> files = Open(store, kBound);
  ASSERT_NE(files, nullptr);
  // Lines 100..199 answered; 0..99 never ran.
  for (int row = 100; row < kMany; row += 10) {
    std::vector<int> rows;
    for (int r = row; r < row + 10; ++r) rows.push_back(r);
    Answered(rows);
  }
  Finished(v1::JOB_STATE_CANCELLED, "cancelled by the client");
  EXPECT_EQ(*files->CatchUp(), BatchFiles::Progress::kSaved);

  const std::vector<std::string> output =
      CustomIds(Lines(store, BatchFiles::OutputFileId(kJob)));
  const std::vector<std::string> errors =
      CustomIds(Lines(store, BatchFiles::ErrorFileId(kJob)));
  ASSERT_EQ(output.size(), 100u);
  ASSERT_EQ(errors.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(errors[i], absl::StrCat("r", i));
    EXPECT_EQ(output[i], absl::StrCat("r", 100 + i));
  }
}

}  // namespace
}  // namespace sdg
