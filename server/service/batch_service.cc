#include "server/service/batch_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "server/jobs/batch_line.h"
#include "server/jobs/job_spec.h"

namespace sdg {
namespace {

constexpr absl::string_view kBatchPrefix = "batch_";

// A running batch's files take its log's events this many at a time (a
// shard each): waking for every commit round cost the batch 3% of its rate
// (bench/batch_api_bench.py). The end of the log wakes them too.
constexpr uint64_t kCatchUpEvents = 64;

absl::Status NoSuchFile(const std::string& file_id) {
  return absl::NotFoundError(
      absl::StrCat("No such File object: ", Quoted(file_id)));
}

absl::Status NoSuchBatch(const std::string& batch_id) {
  return absl::NotFoundError(
      absl::StrCat("No such Batch object: ", Quoted(batch_id)));
}

bool Ended(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace

std::string BatchService::BatchId(absl::string_view job_id) {
  return absl::StrCat(kBatchPrefix, job_id);
}

BatchService::BatchService(const Options& options, JobService& jobs,
                           JobStore& store)
    : options_(options),
      jobs_(jobs),
      store_(store),
      files_poster_(std::make_shared<FilesPoster>()),
      files_thread_(std::make_unique<Executor>(1, "sdg-batch-files")) {
  absl::MutexLock lock(&files_poster_->mu);
  files_poster_->executor = files_thread_.get();
}

BatchService::~BatchService() {
  absl::MutexLock lock(&files_poster_->mu);
  files_poster_->executor = nullptr;
  // files_thread_ goes first of the members: what is queued runs while
  // the rest is there.
}

absl::Status BatchService::CheckUploadPurpose(const std::string& purpose) {
  if (purpose == "batch") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("purpose: ", Quoted(purpose),
                   " is not supported; this server takes \"batch\" files"));
}

absl::StatusOr<std::unique_ptr<FileUpload>> BatchService::StartFileUpload(
    const Caller& caller, std::string filename) {
  FileUpload::Limits limits;
  SDG_ASSIGN_OR_RETURN(limits.upload, jobs_.UploadLimits(caller));
  limits.upload.max_upload_bytes =
      limits.upload.max_upload_bytes > 0
          ? std::min(limits.upload.max_upload_bytes, options_.max_file_bytes)
          : options_.max_file_bytes;
  limits.max_lines = options_.max_file_lines;
  limits.bytes_flag = "--openai_max_file_mib";
  limits.lines_flag = "--openai_max_file_lines";
  return std::make_unique<FileUpload>(store_, absl::StrCat("file-", NewJobId()),
                                      caller.tenant, std::move(filename),
                                      "batch", std::move(limits));
}

absl::StatusOr<StoredDataset> BatchService::GetFile(
    const Caller& caller, const std::string& file_id) {
  absl::StatusOr<StoredDataset> file = store_.FindUpload(file_id);
  if (absl::IsNotFound(file.status())) return NoSuchFile(file_id);
  if (!file.ok()) return file.status();
  // Another tenant's file, and a gRPC upload, are as absent as none.
  if (!caller.Owns(file->tenant) || file->dataset.purpose().empty()) {
    return NoSuchFile(file_id);
  }
  return file;
}

absl::StatusOr<std::vector<StoredDataset>> BatchService::ListFiles(
    const Caller& caller, const std::string& purpose) {
  SDG_ASSIGN_OR_RETURN(std::vector<StoredDataset> uploads,
                       store_.ListUploads(caller.tenant));
  std::vector<StoredDataset> files;
  for (auto it = uploads.rbegin(); it != uploads.rend(); ++it) {
    const std::string& its = it->dataset.purpose();
    if (its.empty() || (!purpose.empty() && its != purpose)) continue;
    files.push_back(std::move(*it));
  }
  return files;
}

absl::Status BatchService::DeleteFile(const Caller& caller,
                                      const std::string& file_id) {
  SDG_RETURN_IF_ERROR(GetFile(caller, file_id).status());
  absl::Status removed = store_.RemoveUpload(file_id);
  if (absl::IsNotFound(removed)) return NoSuchFile(file_id);
  return removed;
}

absl::Status BatchService::ReadFile(
    const Caller& caller, const std::string& file_id,
    absl::FunctionRef<absl::Status(absl::string_view)> on_line) {
  SDG_RETURN_IF_ERROR(GetFile(caller, file_id).status());
  absl::StatusOr<std::shared_ptr<Dataset>> file = store_.OpenUpload(file_id);
  if (absl::IsNotFound(file.status())) return NoSuchFile(file_id);
  if (!file.ok()) return file.status();
  return ReadFileLines(**file, 0, (*file)->row_count(), on_line);
}

absl::StatusOr<BatchView> BatchService::CreateBatch(
    const Caller& caller, const std::string& input_file_id,
    const v1::OpenAIBatch& batch) {
  absl::StatusOr<StoredDataset> file = GetFile(caller, input_file_id);
  if (absl::IsNotFound(file.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_file_id: ", file.status().message()));
  }
  if (!file.ok()) return file.status();
  if (file->dataset.purpose() != "batch") {
    return absl::InvalidArgumentError(
        absl::StrCat("input_file_id: ", Quoted(input_file_id), " has purpose ",
                     Quoted(file->dataset.purpose()), ", not \"batch\""));
  }
  v1::GenerateJobRequest request;
  request.set_dataset_id(input_file_id);
  *request.mutable_openai_batch() = batch;
  request.mutable_openai_batch()->set_input_file_id(input_file_id);
  request.set_detach(true);
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       jobs_.Admit(caller, request, {}));
  // A batch whose lines failed validation has ended already, with no files.
  if (!job->IsFinished()) StartFiles(*job);
  return View(job, /*finalize=*/false);
}

absl::StatusOr<std::shared_ptr<Job>> BatchService::FindBatchJob(
    const Caller& caller, const std::string& batch_id) {
  if (!absl::StartsWith(batch_id, kBatchPrefix)) return NoSuchBatch(batch_id);
  absl::StatusOr<std::shared_ptr<Job>> job =
      jobs_.Find(caller, batch_id.substr(kBatchPrefix.size()));
  if (absl::IsNotFound(job.status()) ||
      (job.ok() && !(*job)->spec().openai_batch.has_value())) {
    return NoSuchBatch(batch_id);
  }
  return job;
}

absl::StatusOr<BatchView> BatchService::GetBatch(const Caller& caller,
                                                 const std::string& batch_id) {
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       FindBatchJob(caller, batch_id));
  return View(job, /*finalize=*/true);
}

absl::StatusOr<BatchService::BatchPage> BatchService::ListBatches(
    const Caller& caller, const std::string& after, int limit) {
  // The caller's batch jobs, oldest first as listed.
  std::vector<std::string> job_ids;
  v1::ListJobsRequest request;
  request.set_page_size(1000);
  do {
    SDG_ASSIGN_OR_RETURN(v1::ListJobsResponse page,
                         jobs_.List(caller, request));
    for (const v1::Job& listed : page.jobs()) {
      if (listed.has_openai_batch()) job_ids.push_back(listed.job_id());
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  std::reverse(job_ids.begin(), job_ids.end());
  size_t first = 0;
  if (!after.empty()) {
    while (first < job_ids.size() && BatchId(job_ids[first]) != after) {
      ++first;
    }
    first = first < job_ids.size() ? first + 1 : job_ids.size();
  }
  BatchPage page;
  size_t next = first;
  for (; next < job_ids.size() &&
         page.batches.size() < static_cast<size_t>(limit);
       ++next) {
    absl::StatusOr<std::shared_ptr<Job>> job =
        jobs_.Find(caller, job_ids[next]);
    if (absl::IsNotFound(job.status())) continue;  // deleted meanwhile
    if (!job.ok()) return job.status();
    SDG_ASSIGN_OR_RETURN(BatchView view, View(*job, /*finalize=*/true));
    page.batches.push_back(std::move(view));
  }
  page.has_more = next < job_ids.size();
  return page;
}

absl::StatusOr<BatchView> BatchService::CancelBatch(
    const Caller& caller, const std::string& batch_id) {
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       FindBatchJob(caller, batch_id));
  {
    absl::MutexLock lock(&cancels_mu_);
    cancel_times_.try_emplace(job->id(), absl::Now());
  }
  SDG_RETURN_IF_ERROR(jobs_.Cancel(caller, job->id()).status());
  return View(job, /*finalize=*/false);
}

absl::StatusOr<BatchView> BatchService::View(const std::shared_ptr<Job>& job,
                                             bool finalize) {
  BatchView view;
  view.job = jobs_.Describe(*job);
  const v1::JobState state = view.job.state();
  view.cancelling = !Ended(state) && job->token().IsCancelled() &&
                    absl::IsCancelled(job->token().reason());
  view.expired =
      BatchFiles::ExpiredByWindow(view.job.state(), view.job.reason());
  {
    // While it cancels: when that was asked for.
    absl::MutexLock lock(&cancels_mu_);
    auto asked = cancel_times_.find(job->id());
    if (asked != cancel_times_.end()) view.cancelling_at = asked->second;
  }
  view.completion_window = job->spec().timeout.value_or(absl::Hours(24));
  if (state == v1::JOB_STATE_FAILED && !view.expired) {
    SDG_ASSIGN_OR_RETURN(JobRecord record, store_.LoadJob(job->id()));
    view.line_errors.assign(record.finished.line_errors().begin(),
                            record.finished.line_errors().end());
  }
  // Its files are written from its log once all of it is stored.
  if (!Ended(state) || !view.line_errors.empty() || !job->IsStoredEnded()) {
    return view;
  }
  if (finalize) {
    SDG_RETURN_IF_ERROR(Finalize(*job));
  } else if (!store_.FindUpload(BatchFiles::OutputFileId(job->id())).ok()) {
    return view;
  }
  view.files_written = true;
  {
    absl::MutexLock lock(&cancels_mu_);
    cancel_times_.erase(job->id());
  }
  if (view.job.rows_succeeded() > 0) {
    view.output_file_id = BatchFiles::OutputFileId(job->id());
  }
  if (view.job.rows_succeeded() < view.job.total_rows()) {
    view.error_file_id = BatchFiles::ErrorFileId(job->id());
  }
  return view;
}

absl::Status BatchService::Finalize(Job& job) {
  absl::MutexLock lock(&finalize_mu_);
  std::shared_ptr<FilesInProgress> running;
  {
    absl::MutexLock files_lock(&files_mu_);
    auto it = files_in_progress_.find(job.id());
    if (it != files_in_progress_.end()) {
      running = std::move(it->second);
      files_in_progress_.erase(it);
    }
  }
  if (running != nullptr) {
    // The files written as its lines committed: the last lines, and save.
    absl::MutexLock files_lock(&running->mu);
    if (running->files != nullptr) {
      std::unique_ptr<BatchFiles> files = std::move(running->files);
      absl::StatusOr<BatchFiles::Progress> progress = files->CatchUp();
      if (progress.ok() && *progress == BatchFiles::Progress::kSaved) {
        return absl::OkStatus();
      }
      Log(LogLevel::kWarning,
          "a batch's files written as it ran are incomplete; writing them "
          "again from its log",
          {{"job_id", job.id()},
           {"error", progress.ok() ? "no end in its log"
                                   : progress.status().ToString()}});
    }
  }
  if (store_.FindUpload(BatchFiles::OutputFileId(job.id())).ok()) {
    return absl::OkStatus();
  }
  SDG_ASSIGN_OR_RETURN(std::unique_ptr<BatchFiles> files, OpenFiles(job));
  SDG_ASSIGN_OR_RETURN(BatchFiles::Progress progress, files->CatchUp());
  if (progress != BatchFiles::Progress::kSaved) {
    return absl::InternalError(absl::StrCat(
        "batch ", Quoted(BatchId(job.id())),
        " has ended but its log has no end to write its files from"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BatchFiles>> BatchService::OpenFiles(
    const Job& job) {
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Dataset> input,
                       store_.OpenJobDataset(job.id()));
  BatchFiles::Batch batch;
  batch.job_id = job.id();
  batch.tenant = job.tenant();
  batch.output_expires_after_seconds =
      job.spec().openai_batch->output_expires_after_seconds();
  return BatchFiles::Open(store_, std::move(batch), std::move(input),
                          job.log());
}

void BatchService::StartFiles(const Job& job) {
  absl::StatusOr<std::unique_ptr<BatchFiles>> files = OpenFiles(job);
  if (!files.ok()) {
    // Not lost: they are written from the log once the batch has ended.
    Log(LogLevel::kWarning,
        "cannot write a batch's files as it runs; they are written once it "
        "has ended",
        {{"job_id", job.id()}, {"error", files.status().ToString()}});
    return;
  }
  auto running = std::make_shared<FilesInProgress>();
  {
    absl::MutexLock lock(&running->mu);
    running->files = *std::move(files);
  }
  {
    absl::MutexLock lock(&files_mu_);
    files_in_progress_[job.id()] = running;
  }
  files_thread_->Post(
      [this, running, job_id = job.id()] { CatchUp(running, job_id); });
}

void BatchService::CatchUp(const std::shared_ptr<FilesInProgress>& running,
                           const std::string& job_id) {
  absl::MutexLock lock(&running->mu);
  if (running->files == nullptr) return;  // Finalize took them over
  BatchFiles& files = *running->files;
  absl::StatusOr<BatchFiles::Progress> progress;
  while (true) {
    progress = files.CatchUp();
    if (!progress.ok() || *progress != BatchFiles::Progress::kFollowing) break;
    // Back here once kCatchUpEvents more are committed, or the log ends
    // (the callback may outlive the service: it goes through
    // files_poster_).
    std::weak_ptr<FilesInProgress> weak = running;
    const bool waiting = files.log().NotifyAfter(
        files.last_read() + kCatchUpEvents - 1,
        [this, poster = files_poster_, weak, job_id] {
          absl::MutexLock lock(&poster->mu);
          if (poster->executor == nullptr) return;
          poster->executor->Post([this, weak, job_id] {
            if (std::shared_ptr<FilesInProgress> running = weak.lock()) {
              CatchUp(running, job_id);
            }
          });
        });
    if (waiting) return;
  }
  if (!progress.ok()) {
    Log(LogLevel::kWarning,
        "cannot write a batch's files as it runs; they are written once it "
        "has ended",
        {{"job_id", job_id}, {"error", progress.status().ToString()}});
  }
  running->files.reset();  // saved, failed, or nothing to write
  absl::MutexLock files_lock(&files_mu_);
  auto it = files_in_progress_.find(job_id);
  if (it != files_in_progress_.end() && it->second == running) {
    files_in_progress_.erase(it);
  }
}

}  // namespace sdg
