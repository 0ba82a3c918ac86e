// What only the SQLite store does, without a server: uploads and job datasets
// live in their own directories, usage counts files, one server per
// state_dir. What every store does is in tests/store/ (the conformance
// suite).
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/store/file_util.h"
#include "server/store/sqlite_job_store.h"
#include "tests/testing/store_test_data.h"
#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;
using testing::Record;

class SqliteJobStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<SqliteJobStore> Open() {
    auto store = SqliteJobStore::Open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string dir_ = testing::MakeTempDir() + "/state";
};

TEST_F(SqliteJobStoreTest, AnUploadGivesJobsTheirOwnCopy) {
  auto store = Open();
  auto upload = store->NewUpload("ds");
  ASSERT_TRUE(upload.ok());
  google::protobuf::Struct row;
  (*row.mutable_fields())["q"].set_string_value("why?");
  ASSERT_TRUE((*upload)->Add(row).ok());
  ASSERT_TRUE((*upload)->Finish().ok());
  StoredDataset stored;
  stored.dataset.set_dataset_id("ds");
  stored.dataset.set_rows(1);
  stored.info = (*upload)->info();
  stored.create_time = absl::FromUnixSeconds(1700000000);
  ASSERT_TRUE(store->SaveUpload(stored).ok());
  auto found = store->FindUpload("ds");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->info.FirstRowMissing("q"), std::nullopt);
  EXPECT_EQ(store->FindUpload("nope").status().code(),
            absl::StatusCode::kNotFound);

  auto dataset = store->UseUploadedDataset("ds", "job");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  // Past its retention the upload goes; the job keeps its rows.
  EXPECT_EQ(*store->PruneUploads(absl::FromUnixSeconds(1700000000)), 0);
  EXPECT_EQ(*store->PruneUploads(absl::FromUnixSeconds(1700000001)), 1);
  EXPECT_EQ(store->FindUpload("ds").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/uploads/ds"));
  auto rows = store->OpenJobDataset("job");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ((*(*rows)->ReadRows(0, 1))[0].fields().at("q").string_value(),
            "why?");
  ASSERT_TRUE(store->AddJob(Record("job")).ok());
  ASSERT_TRUE(store->RemoveJob("job").ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/jobs/job"));
  EXPECT_TRUE(store->LoadJobs()->empty());
}

TEST_F(SqliteJobStoreTest, ATenantsUsageCountsItsFilesEachOnce) {
  auto store = Open();
  auto upload = store->NewUpload("ds");
  ASSERT_TRUE(upload.ok());
  google::protobuf::Struct row;
  (*row.mutable_fields())["q"].set_string_value(std::string(4000, 'q'));
  ASSERT_TRUE((*upload)->Add(row).ok());
  ASSERT_TRUE((*upload)->Finish().ok());
  StoredDataset stored;
  stored.dataset.set_dataset_id("ds");
  stored.tenant = "alice";
  stored.info = (*upload)->info();
  ASSERT_TRUE(store->SaveUpload(stored).ok());
  StorageUsage usage = *store->TenantUsage("alice");
  EXPECT_EQ(usage.upload_bytes,
            std::filesystem::file_size(dir_ + "/uploads/ds/rows.bin") +
                std::filesystem::file_size(dir_ + "/uploads/ds/rows.idx"));
  EXPECT_GT(usage.upload_bytes, 4000);

  // A job naming the upload shares its files (a hard link): not counted
  // twice. Its events are its results.
  ASSERT_TRUE(store->UseUploadedDataset("ds", "job").ok());
  JobRecord record = Record("job");
  record.tenant = "alice";
  ASSERT_TRUE(store->AddJob(record).ok());
  {
    auto log = store->OpenJobLog("job", [](const LogEvent&) {});
    ASSERT_TRUE(log.ok());
  }
  std::ofstream(dir_ + "/jobs/job/events.log", std::ios::app)
      << std::string(500, 'e');
  StorageUsage with_job = *store->TenantUsage("alice");
  EXPECT_EQ(with_job.upload_bytes, usage.upload_bytes);
  EXPECT_EQ(with_job.dataset_bytes, 0);
  EXPECT_EQ(with_job.result_bytes,
            std::filesystem::file_size(dir_ + "/jobs/job/events.log"));
  EXPECT_EQ(with_job.total(), usage.upload_bytes + with_job.result_bytes);
  // Another tenant holds nothing.
  EXPECT_EQ(store->TenantUsage("bob")->total(), 0);
}

TEST_F(SqliteJobStoreTest, OneServerPerStateDir) {
  auto first = Open();
  auto second = SqliteJobStore::Open(dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another sdgd"));
  first.reset();
  EXPECT_TRUE(SqliteJobStore::Open(dir_).ok());
}

TEST_F(SqliteJobStoreTest, StateDirThatCannotBeMadeIsNamed) {
  // A regular file where the directory should be: no privilege can fix it,
  // so the test holds when run as root too.
  std::string file = testing::MakeTempDir() + "/file";
  std::ofstream(file) << "x";
  auto store = SqliteJobStore::Open(file + "/state");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(file));
}

TEST(FileErrorTest, DiskFullAndUnwritableSayWhatToDoAndName) {
  absl::Status full = FileError("write", "/s/jobs/j/events.log", ENOSPC);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("/s/jobs/j/events.log"));
  EXPECT_THAT(full.message(), HasSubstr("free space"));
  // Read-only and permission errors (which a test running as root cannot
  // provoke with chmod) are FAILED_PRECONDITION naming the path.
  for (int error : {EROFS, EACCES, EPERM, ENOTDIR}) {
    absl::Status status = FileError("create", "/s", error);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << error;
    EXPECT_THAT(status.message(), HasSubstr("create /s: "));
  }
}

TEST(RequestDigestTest, SameRequestSameDigestDetachAside) {
  v1::GenerateJobRequest request;
  request.set_job_id("x");
  auto* row = request.add_rows()->mutable_fields();
  for (const char* key : {"a", "b", "c", "d", "e", "f"}) {
    (*row)[key].set_string_value(key);
  }
  const std::string digest = RequestDigest(request);
  EXPECT_EQ(digest.size(), 64u);
  v1::GenerateJobRequest detached = request;
  detached.set_detach(true);
  EXPECT_EQ(RequestDigest(detached), digest);
  request.mutable_block()->set_max_tokens(1);
  EXPECT_NE(RequestDigest(request), digest);
}

}  // namespace
}  // namespace sdg
