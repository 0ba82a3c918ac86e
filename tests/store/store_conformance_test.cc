// The store conformance suite (store_conformance.h) for the stores that
// need no server: memory and SQLite + files.
#include "tests/store/store_conformance.h"

#include "server/store/memory_job_store.h"
#include "server/store/sqlite_job_store.h"

namespace sdg {
namespace {

StoreKind MemoryStore() {
  return {"memory", false,
          [](const std::string&) -> absl::StatusOr<std::unique_ptr<JobStore>> {
            return std::make_unique<MemoryJobStore>();
          },
          nullptr};
}

StoreKind SqliteStore() {
  return {
      "sqlite", true,
      [](const std::string& dir) -> absl::StatusOr<std::unique_ptr<JobStore>> {
        absl::StatusOr<std::unique_ptr<SqliteJobStore>> store =
            SqliteJobStore::Open(dir);
        if (!store.ok()) return store.status();
        return std::unique_ptr<JobStore>(*std::move(store));
      },
      [](const std::string& dir, const std::string& job) {
        return dir + "/jobs/" + job + "/events.log";
      }};
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest,
                         ::testing::Values(MemoryStore(), SqliteStore()),
                         StoreName);
INSTANTIATE_TEST_SUITE_P(Stores, DurableStoreConformanceTest,
                         ::testing::Values(SqliteStore()), StoreName);
INSTANTIATE_TEST_SUITE_P(Stores, FileLogStoreConformanceTest,
                         ::testing::Values(SqliteStore()), StoreName);

}  // namespace
}  // namespace sdg
