// The PostgreSQL store (--store postgresql://...): records, datasets,
// uploads and event logs in one database that several sdgd replicas can
// share. Datasets are stored in chunks of rows (about 64 KiB each) and
// read by range, so no dataset passes whole through one process's memory. The
// schema is migrated at open (postgres_schema.h). Credentials come from the
// conninfo the caller read from a file or from libpq's environment (PGPASSWORD,
// PGPASSFILE); TLS through libpq's sslmode.
//
// Several replicas may share the database: with a replica lease
// (replica_lease.h) Open waits as a standby until this replica is the
// active one, and every job record and event it writes is fenced by the
// lease. One replica runs every job at a time; leasing shards to several
// at once builds on this.
#ifndef SDG_SERVER_STORE_POSTGRES_JOB_STORE_H_
#define SDG_SERVER_STORE_POSTGRES_JOB_STORE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/store/commit_schedule.h"
#include "server/store/job_store.h"
#include "server/store/log_event.h"
#include "server/store/postgres.h"
#include "server/store/postgres_event_log.h"
#include "server/store/replica_lease.h"

namespace sdg {

class PostgresJobStore final : public JobStore {
 public:
  struct Options {
    std::string conninfo;  // a postgresql:// URL or key=value pairs
    // Connections for records, datasets and readers (the committer has
    // its own).
    int pool_size = 8;
    CommitterOptions committer;
    // Share the database with other replicas: Open takes the replica
    // lease (waiting as a standby), and writes are fenced by it. Without
    // it, the caller promises that no other store writes the database.
    std::optional<ReplicaLease::Options> replica_lease;
    // Wait for a database out of reach (at the start, or lost while a
    // standby) instead of failing: Open tries again after 0.5 s, doubling
    // to 10 s, saying so in the log, until the database answers or
    // `stop_waiting` (the replica lease's) is notified. A refusal
    // (credentials, no such database) still fails at once.
    bool wait_for_database = false;
  };
  // Connects, migrates the schema, takes the replica lease if asked and
  // starts the committer.
  static absl::StatusOr<std::unique_ptr<PostgresJobStore>> Open(
      Options options);

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
  absl::StatusOr<StorageUsage> TenantUsage(const std::string& tenant) override;

  const PostgresCommitter& committer() const { return *committer_; }
  // The replica lease this store holds, or null.
  const ReplicaLease* lease() const { return lease_.get(); }

 private:
  // One attempt at Open.
  static absl::StatusOr<std::unique_ptr<PostgresJobStore>> OpenOnce(
      Options options);

  PostgresJobStore(std::shared_ptr<pg::Pool> pool,
                   std::unique_ptr<ReplicaLease> lease,
                   std::unique_ptr<PostgresCommitter> committer,
                   absl::Duration max_outage)
      : pool_(std::move(pool)),
        lease_(std::move(lease)),
        committer_(std::move(committer)),
        max_outage_(max_outage) {}
  // Runs `write` in a transaction that first checks, and holds, the
  // replica lease (when there is one): FAILED_PRECONDITION if it is lost.
  absl::Status WriteFenced(pg::Connection& conn, const char* doing,
                           absl::FunctionRef<absl::Status()> write);
  absl::StatusOr<std::unique_ptr<DatasetBuilder>> NewBuilder(
      std::string holder);
  // Drops `holder`'s hold on its dataset, and the dataset with its last.
  absl::Status DropHolder(const std::string& holder);
  absl::StatusOr<std::shared_ptr<Dataset>> OpenHeld(const std::string& holder);

  const std::shared_ptr<pg::Pool> pool_;
  // Released after the committer's last round.
  const std::unique_ptr<ReplicaLease> lease_;
  const std::unique_ptr<PostgresCommitter> committer_;
  // How long reads of datasets wait out a database outage (the committer's
  // max_outage).
  const absl::Duration max_outage_;
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_POSTGRES_JOB_STORE_H_
