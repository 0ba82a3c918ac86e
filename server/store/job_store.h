// Where jobs live: their records (request, state, times, counts), their
// datasets and their event logs, each behind an interface of its own
// (JobRecordStore, DatasetStore, JobLogStore) that JobStore joins. Stores:
// SqliteJobStore (the default: SQLite in WAL mode plus files under
// --state_dir; jobs survive restarts and crashes), MemoryJobStore
// (--ephemeral: nothing outlives the process) and PostgresJobStore
// (--store: one database that replicas share).
#ifndef SDG_SERVER_JOBS_JOB_STORE_H_
#define SDG_SERVER_JOBS_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/dataset.h"
#include "server/store/event_log.h"
#include "server/store/log_event.h"

namespace sdg {

// What the store keeps of a job besides its dataset and its events.
struct JobRecord {
  std::string job_id;
  // The tenant that created it ("" when authentication is off).
  std::string tenant;
  // As received, without its inline rows (they are the job's dataset).
  v1::GenerateJobRequest request;
  // SHA-256 of the whole request as received (rows included; detach not):
  // a second submit with the same id and digest is the same job.
  std::string request_digest;
  v1::JobState state = v1::JOB_STATE_QUEUED;
  absl::Time create_time = absl::InfinitePast();
  absl::Time start_time = absl::InfinitePast();
  absl::Time end_time = absl::InfinitePast();
  std::string reason;
  int32_t resumed = 0;
  // The final counts, once the job has ended.
  v1::JobFinished finished;
  // Saved with the final state, so that an ended job is described from its
  // record alone: the seed rows, the shards cut and the sequence of the
  // last event (0 in records saved before they were kept).
  int64_t total_rows = 0;
  int64_t total_shards = 0;
  uint64_t last_sequence = 0;
  // Set by the store: 1 once added, one more at each UpdateJob. A record is
  // saved only over the version it was loaded or last saved at (compare
  // and set), so a writer that lost the job to another cannot overwrite
  // what the other saved.
  int64_t version = 0;

  // QUEUED or RUNNING as stored: the job runs on when a server starts.
  bool unfinished() const {
    return state == v1::JOB_STATE_QUEUED || state == v1::JOB_STATE_RUNNING;
  }
};

// An uploaded dataset, as UploadDataset answers and jobs name it.
struct StoredDataset {
  v1::Dataset dataset;
  // The tenant that uploaded it: only its jobs may use it.
  std::string tenant;
  DatasetInfo info;
  absl::Time create_time = absl::InfinitePast();
  // When PruneUploads removes it whatever the retention (a batch's
  // output_expires_after); InfiniteFuture: only the retention does.
  absl::Time expire_time = absl::InfiniteFuture();
};

// An upload's expire_time as the SQL stores keep it: Unix nanoseconds, the
// largest int64 for none (so that `expire_ns < now` never holds for it).
int64_t ExpireNanos(absl::Time expire_time);
absl::Time ExpireTimeOf(int64_t expire_ns);

// The bytes a tenant holds in the store.
struct StorageUsage {
  int64_t upload_bytes = 0;   // its uploads
  int64_t dataset_bytes = 0;  // its jobs' datasets (a job's copy of an upload
                              // it names shares the upload's bytes)
  int64_t result_bytes = 0;   // its jobs' event logs: results and errors
  int64_t total() const { return upload_bytes + dataset_bytes + result_bytes; }
};

// A job's datasets and the uploads jobs may name.
class DatasetStore {
 public:
  virtual ~DatasetStore() = default;

  // A new job's dataset; the job owns it from AddJob on.
  virtual absl::StatusOr<std::unique_ptr<DatasetBuilder>> NewJobDataset(
      const std::string& job_id) = 0;
  // Gives the job a dataset uploaded earlier (it keeps it if the upload
  // goes). NOT_FOUND (NoSuchUpload) for an upload not stored.
  virtual absl::StatusOr<std::shared_ptr<Dataset>> UseUploadedDataset(
      const std::string& dataset_id, const std::string& job_id) = 0;
  // Forgets a dataset made for a job that was then refused.
  virtual void DiscardJobDataset(const std::string& job_id) = 0;
  // NOT_FOUND (NoJobDataset) for a job with none.
  virtual absl::StatusOr<std::shared_ptr<Dataset>> OpenJobDataset(
      const std::string& job_id) = 0;

  // Uploads: a builder, then SaveUpload once it has finished.
  virtual absl::StatusOr<std::unique_ptr<DatasetBuilder>> NewUpload(
      const std::string& dataset_id) = 0;
  virtual absl::Status SaveUpload(const StoredDataset& dataset) = 0;
  virtual void DiscardUpload(const std::string& dataset_id) = 0;
  // NOT_FOUND naming the id.
  virtual absl::StatusOr<StoredDataset> FindUpload(
      const std::string& dataset_id) = 0;
  // An upload's rows, to read without giving them to a job (EstimateJob).
  // NOT_FOUND (NoSuchUpload) for an upload not stored.
  virtual absl::StatusOr<std::shared_ptr<Dataset>> OpenUpload(
      const std::string& dataset_id) = 0;
  // Removes uploads saved before `cutoff`, and those whose expire_time has
  // passed (jobs keep their own copies). Returns how many went.
  virtual absl::StatusOr<int> PruneUploads(absl::Time cutoff) = 0;
  // `tenant`'s uploads, oldest first (the Batch API's GET /v1/files).
  virtual absl::StatusOr<std::vector<StoredDataset>> ListUploads(
      const std::string& tenant) = 0;
  // Removes one upload, its record and its rows (jobs keep their own
  // copies). NOT_FOUND (NoSuchUpload) for an upload not stored.
  virtual absl::Status RemoveUpload(const std::string& dataset_id) = 0;
};

// Jobs' records.
class JobRecordStore {
 public:
  virtual ~JobRecordStore() = default;

  // Durable when it returns; the stored record's version is 1 (whatever
  // record.version says). ALREADY_EXISTS for a job_id stored already.
  virtual absl::Status AddJob(const JobRecord& record) = 0;
  // Saves the record's state, times, reason and counts (its request and
  // tenant are fixed at AddJob) if the stored version is record.version,
  // which then becomes record.version + 1. NOT_FOUND (NoSuchJob) for a job
  // not stored; ABORTED (JobChanged) if another write came first.
  virtual absl::Status UpdateJob(const JobRecord& record) = 0;
  // Every job, oldest first.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadJobs() = 0;
  // One job's record. NOT_FOUND (NoSuchJob) for a job not stored.
  absl::StatusOr<JobRecord> LoadJob(const std::string& job_id);
  // The records of those of `job_ids` the store holds, in the order given,
  // read at once (a page of ListJobs): one transaction, or one query.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadJobsById(
      absl::Span<const std::string> job_ids) = 0;
};

// Jobs' event logs.
class JobLogStore {
 public:
  virtual ~JobLogStore() = default;

  // The log of a job that may still append; what it holds goes to `replay`.
  virtual absl::StatusOr<std::shared_ptr<EventLog>> OpenJobLog(
      const std::string& job_id,
      absl::FunctionRef<void(const LogEvent&)> replay) = 0;
  // The log of a job that ended before this process started.
  virtual std::shared_ptr<EventLog> OpenFinishedJobLog(
      const std::string& job_id) = 0;
};

// The whole store: the three above, and what spans them.
class JobStore : public DatasetStore,
                 public JobRecordStore,
                 public JobLogStore {
 public:
  // True if jobs survive a restart.
  virtual bool durable() const = 0;

  // The record, the dataset and the events; OK if there was none.
  virtual absl::Status RemoveJob(const std::string& job_id) = 0;

  // What `tenant` holds, counted from what is stored (not from memory), so
  // that every process sharing the store counts the same. UNIMPLEMENTED for
  // a store that keeps nothing on disk.
  virtual absl::StatusOr<StorageUsage> TenantUsage(
      const std::string& tenant) = 0;
};

// NOT_FOUND for a dataset_id with no upload (or, to its caller, another
// tenant's).
absl::Status NoSuchUpload(const std::string& dataset_id);
// NOT_FOUND: the store holds no record of the job, or no dataset for it.
absl::Status NoSuchJob(const std::string& job_id);
absl::Status NoJobDataset(const std::string& job_id);
// ABORTED: the job's record was saved by another writer since this one
// loaded or saved it at `expected`.
absl::Status JobChanged(const std::string& job_id, int64_t expected,
                        int64_t stored);

// SHA-256 of the request as the digest compares it (detach excluded).
// Inline rows kept serialized hash as sent: the same request means the same
// bytes. `serialized_rows`: inline rows the caller kept serialized, each as
// sent (then the request's own `rows` are empty).
std::string RequestDigest(
    const v1::GenerateJobRequest& request,
    absl::Span<const absl::string_view> serialized_rows = {});

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_STORE_H_
