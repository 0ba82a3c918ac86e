// The --ephemeral store: everything in memory, nothing survives the process.
// A job's record, dataset and events stay in memory until the job is
// removed.
#ifndef SDG_SERVER_JOBS_MEMORY_JOB_STORE_H_
#define SDG_SERVER_JOBS_MEMORY_JOB_STORE_H_

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/store/job_store.h"
#include "server/store/log_event.h"

namespace sdg {

class MemoryJobStore : public JobStore {
 public:
  bool durable() const override { return false; }
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
  // UNIMPLEMENTED: --ephemeral holds no disk to share.
  absl::StatusOr<StorageUsage> TenantUsage(const std::string& tenant) override;

 private:
  // Remembers the dataset a builder made for a job when it finishes.
  class Builder;

  // A record with its place in the order of AddJob calls.
  struct NumberedRecord {
    uint64_t added = 0;
    JobRecord record;
  };

  absl::Mutex mu_;
  uint64_t jobs_added_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, NumberedRecord> records_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Dataset>> job_datasets_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Dataset>> upload_datasets_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, StoredDataset> uploads_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<EventLog>> logs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_MEMORY_JOB_STORE_H_
