// The embedded default store, under --state_dir:
//   sdgd.db                    SQLite (WAL, synchronous=FULL): jobs, uploads
//   jobs/ID/rows.{bin,idx}     the job's dataset (see dataset.h)
//   jobs/ID/events.log         the job's events (see file_event_log.h)
//   uploads/ID/rows.{bin,idx}  uploaded datasets
//   LOCK                       held (flock) by the one sdgd using the dir
// A job's shard commits are its events.log records: a shard is committed
// exactly when its group of events (shard_result parts, shard_error runs)
// is whole on disk.
#ifndef SDG_SERVER_JOBS_SQLITE_JOB_STORE_H_
#define SDG_SERVER_JOBS_SQLITE_JOB_STORE_H_

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "server/store/file_event_log.h"
#include "server/store/file_util.h"
#include "server/store/job_store.h"
#include "server/store/log_event.h"

struct sqlite3;
struct sqlite3_stmt;

namespace sdg {

class SqliteJobStore final : public JobStore {
 public:
  // Creates the directory and the database if missing. FAILED_PRECONDITION
  // naming the path when it cannot be written. `committer`: how the event
  // logs are committed (and retried when the disk fails).
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(
      const std::string& state_dir, LogCommitter::Options committer = {});
  ~SqliteJobStore() override;

  bool durable() const override { return true; }
  absl::StatusOr<std::unique_ptr<DatasetBuilder>> NewJobDataset(
      const std::string& job_id) override;
  absl::StatusOr<std::shared_ptr<Dataset>> UseUploadedDataset(
      const std::string& dataset_id, const std::string& job_id) override;
  void DiscardJobDataset(const std::string& job_id) override;
  absl::StatusOr<std::shared_ptr<Dataset>> OpenJobDataset(
      const std::string& job_id) override;
  absl::StatusOr<std::unique_ptr<DatasetBuilder>> NewUpload(
      const std::string& dataset_id) override;
  absl::Status SaveUpload(const StoredDataset& dataset) override;
  void DiscardUpload(const std::string& dataset_id) override;
  absl::StatusOr<StoredDataset> FindUpload(
      const std::string& dataset_id) override;
  absl::StatusOr<std::shared_ptr<Dataset>> OpenUpload(
      const std::string& dataset_id) override;
  absl::StatusOr<int> PruneUploads(absl::Time cutoff) override;
  absl::StatusOr<std::vector<StoredDataset>> ListUploads(
      const std::string& tenant) override;
  absl::Status RemoveUpload(const std::string& dataset_id) override;
  absl::Status AddJob(const JobRecord& record) override;
  absl::Status UpdateJob(const JobRecord& record) override;
  absl::Status RemoveJob(const std::string& job_id) override;
  absl::StatusOr<std::vector<JobRecord>> LoadJobs() override;
  absl::StatusOr<std::vector<JobRecord>> LoadJobsById(
      absl::Span<const std::string> job_ids) override;
  absl::StatusOr<std::shared_ptr<EventLog>> OpenJobLog(
      const std::string& job_id,
      absl::FunctionRef<void(const LogEvent&)> replay) override;
  std::shared_ptr<EventLog> OpenFinishedJobLog(
      const std::string& job_id) override;
  // The sizes of the tenant's files under state_dir, each inode once.
  absl::StatusOr<StorageUsage> TenantUsage(const std::string& tenant) override;

  const LogCommitter& committer() const { return *committer_; }

  // The statements the store runs, each prepared once (see Prepared).
  enum class Sql {
    kInsertUpload,
    kSelectUpload,
    kSelectUploadsBefore,
    kDeleteUpload,
    kInsertJob,
    kUpdateJob,
    kDeleteJob,
    kSelectJobs,
    kSelectJob,
    kSelectUploadsOfTenant,
    kSelectJobsOfTenant,
    kSelectJobVersion,
    kSelectUploadsListed,
  };
  static constexpr int kStatementCount = 13;

 private:
  struct FinalizeStatement {
    void operator()(sqlite3_stmt* stmt) const;
  };
  // A prepared statement lent for one use: reset, its bindings cleared,
  // when the use ends.
  class StatementUse;

  SqliteJobStore(std::string state_dir, sqlite3* db, UniqueFd lock,
                 LogCommitter::Options committer);
  std::string JobDir(const std::string& job_id) const;
  std::string UploadDir(const std::string& dataset_id) const;
  // `sql`, prepared on its first use and kept until the store closes.
  absl::StatusOr<StatementUse> Prepared(Sql sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's record, or nullopt if there is none.
  absl::StatusOr<std::optional<JobRecord>> SelectJob(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first column of `sql`'s rows, its one parameter `tenant`.
  absl::StatusOr<std::vector<std::string>> IdsOfTenant(
      Sql sql, const std::string& tenant);
  // Runs one statement that returns no rows, with `bind` filling its
  // parameters. Returns how many rows it changed.
  absl::StatusOr<int> Execute(Sql sql,
                              absl::FunctionRef<void(sqlite3_stmt*)> bind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SQLite's last error as a status whose code says what to do; `doing`
  // names the step that failed.
  absl::Status Error(const char* doing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string state_dir_;
  const UniqueFd lock_;  // flock'd state_dir/LOCK, held while open
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
  std::array<std::unique_ptr<sqlite3_stmt, FinalizeStatement>, kStatementCount>
      statements_ ABSL_GUARDED_BY(mu_);
  // Last: logs may be committing until it is gone.
  std::unique_ptr<LogCommitter> committer_;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SQLITE_JOB_STORE_H_
