// The OpenAI Batch API's files and batches over sdgd's own jobs: a file is
// an upload whose rows are its lines (file_upload.h), a batch is a job that
// runs its input file's lines (JobSpec::openai_batch), and a batch's output
// and error files are written, in input order, from the job's committed
// events as they commit (batch_files.h). It knows no HTTP:
// server/api/batch_api.h decodes the requests into it and encodes its answers
// as OpenAI's objects. Every call blocks on the store: callers run them off the
// HTTP loop.
#ifndef SDG_SERVER_SERVICE_BATCH_SERVICE_H_
#define SDG_SERVER_SERVICE_BATCH_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/executor.h"
#include "sdg/v1/generation.pb.h"
#include "server/service/batch_files.h"
#include "server/service/caller.h"
#include "server/service/file_upload.h"
#include "server/service/job_service.h"
#include "server/store/job_store.h"

namespace sdg {

// A batch as the Batch API shows it: its job, and what the job alone does
// not say.
struct BatchView {
  v1::Job job;
  // Validation's errors, for a batch that failed it.
  std::vector<v1::BatchLineError> line_errors;
  // Once the job has ended: its files are written (until then the batch is
  // finalizing, or cancelling), the output file when a line succeeded, the
  // error file when one did not.
  bool files_written = false;
  std::string output_file_id;
  std::string error_file_id;
  // Cancelled, and not yet ended.
  bool cancelling = false;
  // While it cancels, when that was asked for (once cancelled, its
  // cancelling_at is its end); InfinitePast otherwise.
  absl::Time cancelling_at = absl::InfinitePast();
  // Ended by its completion window, which is this long from its creation.
  bool expired = false;
  absl::Duration completion_window = absl::Hours(24);
};

class BatchService {
 public:
  struct Options {
    // OpenAI's limits: 200 MB and 50,000 lines a file.
    int64_t max_file_bytes = 200 << 20;
    int64_t max_file_lines = 50000;
    // The Batch API's list limit (OpenAI's: 10,000 files, 100 batches).
    int max_list_files = 10000;
    int max_list_batches = 100;
  };

  BatchService(const Options& options, JobService& jobs, JobStore& store);
  ~BatchService();

  // Files. A file belongs to its tenant: another tenant's is NOT_FOUND.
  // A file of purpose "batch" (the only one a client uploads), whose
  // bytes are taken as they arrive.
  absl::StatusOr<std::unique_ptr<FileUpload>> StartFileUpload(
      const Caller& caller, std::string filename);
  // INVALID_ARGUMENT naming the field unless an upload's `purpose` is one
  // this server takes.
  static absl::Status CheckUploadPurpose(const std::string& purpose);
  absl::StatusOr<StoredDataset> GetFile(const Caller& caller,
                                        const std::string& file_id);
  // The caller's files (those of the Batch API: with a purpose), newest
  // first; `purpose` empty lists every purpose.
  absl::StatusOr<std::vector<StoredDataset>> ListFiles(
      const Caller& caller, const std::string& purpose);
  absl::Status DeleteFile(const Caller& caller, const std::string& file_id);
  // The file's lines in order, each without its newline.
  absl::Status ReadFile(
      const Caller& caller, const std::string& file_id,
      absl::FunctionRef<absl::Status(absl::string_view)> on_line);

  // Batches: ids are "batch_" and the job's id.
  absl::StatusOr<BatchView> CreateBatch(const Caller& caller,
                                        const std::string& input_file_id,
                                        const v1::OpenAIBatch& batch);
  // An ended batch's files are written here the first time it is asked for.
  absl::StatusOr<BatchView> GetBatch(const Caller& caller,
                                     const std::string& batch_id);
  // A page of the caller's batches, newest first: those after the batch
  // `after` names (empty: from the newest; one no longer listed: none), at
  // most `limit`. Only the page's batches are looked at closely.
  struct BatchPage {
    std::vector<BatchView> batches;
    bool has_more = false;
  };
  absl::StatusOr<BatchPage> ListBatches(const Caller& caller,
                                        const std::string& after, int limit);
  absl::StatusOr<BatchView> CancelBatch(const Caller& caller,
                                        const std::string& batch_id);

  static std::string BatchId(absl::string_view job_id);

 private:
  // The job of `batch_id`: NOT_FOUND unless it is the caller's batch.
  absl::StatusOr<std::shared_ptr<Job>> FindBatchJob(
      const Caller& caller, const std::string& batch_id);
  // The job as a batch; `finalize` writes an ended job's files first.
  absl::StatusOr<BatchView> View(const std::shared_ptr<Job>& job,
                                 bool finalize);
  // Writes an ended job's output and error files unless they are stored:
  // what its BatchFiles left to write, or all of it.
  absl::Status Finalize(Job& job);
  absl::StatusOr<std::unique_ptr<BatchFiles>> OpenFiles(const Job& job);

  // A batch's files written as its lines commit, on files_thread_.
  struct FilesInProgress {
    absl::Mutex mu;
    // Null once saved, failed, or taken over by Finalize.
    std::unique_ptr<BatchFiles> files ABSL_GUARDED_BY(mu);
  };
  // Starts writing the files of `job`, a batch just created.
  void StartFiles(const Job& job);
  // Takes what is committed, then waits for kCatchUpEvents more commits
  // (or the log's end) on files_thread_.
  void CatchUp(const std::shared_ptr<FilesInProgress>& running,
               const std::string& job_id);
  // files_thread_ as a log's commit callback reaches it: such a callback
  // may run after the service is gone, when this is null.
  struct FilesPoster {
    absl::Mutex mu;
    Executor* executor ABSL_GUARDED_BY(mu) = nullptr;
  };

  const Options options_;
  JobService& jobs_;
  JobStore& store_;
  // One batch's files are written by one call at a time.
  absl::Mutex finalize_mu_;
  // When each batch's cancel was first asked for, until it is cancelled
  // and its files are written.
  absl::Mutex cancels_mu_;
  absl::flat_hash_map<std::string, absl::Time> cancel_times_
      ABSL_GUARDED_BY(cancels_mu_);
  absl::Mutex files_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<FilesInProgress>>
      files_in_progress_ ABSL_GUARDED_BY(files_mu_);
  const std::shared_ptr<FilesPoster> files_poster_;
  // Last: its thread stops first.
  const std::unique_ptr<Executor> files_thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_BATCH_SERVICE_H_
