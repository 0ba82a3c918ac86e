// The store conformance suite: one set of tests that every JobStore
// implementation must pass, run against each of them. What the layers above
// rely on is written down once, as tests (store_conformance.cc): records,
// datasets, uploads, event logs and their readers. Each test binary
// instantiates the suites for its stores: store_conformance_test.cc for the
// memory store and SQLite + files, postgres_store_test.cc for PostgreSQL
// (against a real server).
//   StoreConformanceTest          every store
//   DurableStoreConformanceTest   stores whose jobs survive reopening
//   FileLogStoreConformanceTest   stores with a log file to damage
#ifndef SDG_TESTS_STORE_STORE_CONFORMANCE_H_
#define SDG_TESTS_STORE_STORE_CONFORMANCE_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "server/store/job_store.h"
#include "tests/testing/subprocess.h"

namespace sdg {

// One store implementation as the suite opens it.
struct StoreKind {
  std::string name;
  bool durable = false;
  // A store over `dir` (a new empty folder per test), opened again over the
  // same folder when a test reopens it.
  std::function<absl::StatusOr<std::unique_ptr<JobStore>>(
      const std::string& dir)>
      open;
  // The path of a job's event log, for the tests that damage it.
  std::function<std::string(const std::string& dir, const std::string& job)>
      log_path;
};

// Tests are named after the store: Stores/StoreConformanceTest.X/sqlite.
void PrintTo(const StoreKind& kind, std::ostream* out);
std::string StoreName(const ::testing::TestParamInfo<StoreKind>& info);

// A row {"q": question}.
google::protobuf::Struct Row(const std::string& question);

class StoreConformanceTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { store_ = Open(); }

  std::unique_ptr<JobStore> Open() {
    absl::StatusOr<std::unique_ptr<JobStore>> store = GetParam().open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  // Closes the store and opens it again over the same folder.
  void Reopen() {
    store_.reset();
    store_ = Open();
  }

  std::shared_ptr<EventLog> OpenLog(const std::string& job,
                                    std::vector<int64_t>* replayed = nullptr) {
    auto log = store_->OpenJobLog(job, [&](const LogEvent& event) {
      if (replayed != nullptr) {
        replayed->push_back(event.shard_result().shard_index());
      }
    });
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? *log : nullptr;
  }

  // An upload of the given questions, saved.
  void Upload(const std::string& id, const std::vector<std::string>& questions,
              absl::Time created, const std::string& tenant = "t",
              absl::Time expires = absl::InfiniteFuture()) {
    auto builder = store_->NewUpload(id);
    ASSERT_TRUE(builder.ok()) << builder.status();
    for (const std::string& q : questions) {
      ASSERT_TRUE((*builder)->Add(Row(q)).ok());
    }
    ASSERT_TRUE((*builder)->Finish().ok());
    StoredDataset stored;
    stored.dataset.set_dataset_id(id);
    stored.dataset.set_rows(static_cast<int64_t>(questions.size()));
    stored.tenant = tenant;
    stored.info = (*builder)->info();
    stored.create_time = created;
    stored.expire_time = expires;
    ASSERT_TRUE(store_->SaveUpload(stored).ok());
  }

  const std::string dir_ = testing::MakeTempDir() + "/state";
  std::unique_ptr<JobStore> store_;
};

using DurableStoreConformanceTest = StoreConformanceTest;
using FileLogStoreConformanceTest = StoreConformanceTest;

}  // namespace sdg

#endif  // SDG_TESTS_STORE_STORE_CONFORMANCE_H_
