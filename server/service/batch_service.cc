#include "server/service/batch_service.h"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "server/jobs/batch_line.h"
#include "server/jobs/job_spec.h"

namespace sdg {
namespace {

constexpr absl::string_view kBatchPrefix = "batch_";

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

// A job that its completion window stopped (JobTimeout's reason).
bool ExpiredByWindow(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_FAILED &&
         absl::StrContains(job.reason(), "timeout of");
}

// One file of a batch's output being written: its lines as rows, and its
// size and digest as they go.
class OutputFile {
 public:
  OutputFile(std::string file_id, std::string filename)
      : file_id_(std::move(file_id)), filename_(std::move(filename)) {}

  absl::Status Open(DatasetStore& store) {
    store.DiscardUpload(file_id_);  // what a crash mid-way left
    SDG_ASSIGN_OR_RETURN(builder_, store.NewUpload(file_id_));
    return absl::OkStatus();
  }
  absl::Status Add(const std::string& line) {
    ++lines_;
    bytes_ += static_cast<int64_t>(line.size()) + 1;
    sha256_.Update(line);
    sha256_.Update("\n");
    SetLineRow(line, row_);
    return builder_->Add(row_);
  }
  absl::Status Save(DatasetStore& store, const std::string& tenant,
                    absl::Time expire_time) {
    SDG_RETURN_IF_ERROR(builder_->Finish().status());
    StoredDataset stored;
    stored.dataset.set_dataset_id(file_id_);
    stored.dataset.set_rows(lines_);
    stored.dataset.set_bytes(bytes_);
    stored.dataset.set_sha256(sha256_.HexDigest());
    stored.dataset.set_filename(filename_);
    stored.dataset.set_purpose("batch_output");
    stored.tenant = tenant;
    stored.info = builder_->info();
    stored.create_time = absl::Now();
    stored.expire_time = expire_time;
    return store.SaveUpload(stored);
  }

 private:
  const std::string file_id_;
  const std::string filename_;
  std::unique_ptr<DatasetBuilder> builder_;
  google::protobuf::Struct row_;  // reused from line to line
  int64_t lines_ = 0;
  int64_t bytes_ = 0;
  Sha256 sha256_;
};

// Writes a batch's output and error files in input order from its job's
// committed events, which come in the order shards committed: a line
// waits in `pending_` until every line before it is written. Shards commit
// near their order (a worker's few at a time, and after a restart the
// shards that were in flight), so few lines wait.
class BatchFilesWriter {
 public:
  BatchFilesWriter(const std::string& job_id, const Dataset& input)
      : job_id_(job_id),
        input_(input),
        output_(BatchService::OutputFileId(job_id),
                absl::StrCat("batch_", job_id, "_output.jsonl")),
        errors_(BatchService::ErrorFileId(job_id),
                absl::StrCat("batch_", job_id, "_error.jsonl")) {}

  absl::Status Open(DatasetStore& store) {
    SDG_RETURN_IF_ERROR(output_.Open(store));
    return errors_.Open(store);
  }

  absl::Status Take(const LogEvent& event) {
    if (event.has_shard_result()) {
      for (const v1::ResultRow& row : event.shard_result().rows()) {
        const auto& columns = row.columns().fields();
        auto text = [&columns](const char* name) -> const std::string& {
          static const std::string kNone;
          auto it = columns.find(name);
          return it == columns.end() ? kNone : it->second.string_value();
        };
        const auto status = columns.find("status_code");
        SDG_RETURN_IF_ERROR(Place(
            row.row_index(),
            Line{true,
                 BatchOutputLine(
                     job_id_, row.row_index(), text("custom_id"),
                     status == columns.end()
                         ? 200
                         : static_cast<int>(status->second.number_value()),
                     text("request_id"), text("body"))}));
      }
    } else if (event.has_shard_error()) {
      const v1::ShardError& error = event.shard_error();
      const std::string code =
          error.http_status() == 0
              ? absl::AsciiStrToLower(absl::StatusCodeToString(
                    static_cast<absl::StatusCode>(error.code())))
          : error.http_status() < 500 ? "invalid_request_error"
                                      : "server_error";
      for (int64_t r = error.first_row();
           r < error.first_row() + error.row_count(); ++r) {
        SDG_ASSIGN_OR_RETURN(std::string custom_id, CustomIdAt(r));
        SDG_RETURN_IF_ERROR(Place(
            r, Line{false,
                    BatchErrorLine(job_id_, r, custom_id, error.http_status(),
                                   code, error.message())}));
      }
    }
    return Flush();
  }

  // The lines no event answered (the batch was cancelled, or expired, or
  // failed) go to the error file with `code` and `message`.
  absl::Status Finish(absl::string_view code, absl::string_view message) {
    for (; next_row_ < input_.row_count(); ++next_row_) {
      auto it = pending_.find(next_row_);
      if (it == pending_.end()) {
        SDG_ASSIGN_OR_RETURN(std::string custom_id, CustomIdAt(next_row_));
        SDG_RETURN_IF_ERROR(errors_.Add(
            BatchErrorLine(job_id_, next_row_, custom_id, 0, code, message)));
        continue;
      }
      SDG_RETURN_IF_ERROR(Write(it->second));
      pending_.erase(it);
    }
    return absl::OkStatus();
  }

  // The error file first: the output file's record says both are stored.
  // `expire_time`: when the store removes them whatever the retention.
  absl::Status Save(DatasetStore& store, const std::string& tenant,
                    absl::Time expire_time) {
    SDG_RETURN_IF_ERROR(errors_.Save(store, tenant, expire_time));
    return output_.Save(store, tenant, expire_time);
  }

 private:
  struct Line {
    bool succeeded = false;
    std::string text;
  };

  // Line `row`: written at once when it is the next, else it waits.
  absl::Status Place(int64_t row, Line line) {
    if (row != next_row_) {
      pending_[row] = std::move(line);
      return absl::OkStatus();
    }
    SDG_RETURN_IF_ERROR(Write(line));
    ++next_row_;
    return absl::OkStatus();
  }

  absl::Status Flush() {
    for (auto it = pending_.begin();
         it != pending_.end() && it->first == next_row_;
         it = pending_.erase(it), ++next_row_) {
      SDG_RETURN_IF_ERROR(Write(it->second));
    }
    return absl::OkStatus();
  }
  absl::Status Write(const Line& line) {
    return line.succeeded ? output_.Add(line.text) : errors_.Add(line.text);
  }
  absl::StatusOr<std::string> CustomIdAt(int64_t row) const {
    SDG_ASSIGN_OR_RETURN(std::vector<google::protobuf::Struct> rows,
                         input_.ReadRows(row, 1));
    return rows.empty() ? std::string() : CustomIdOf(RowLine(rows.front()));
  }

  const std::string& job_id_;
  const Dataset& input_;
  OutputFile output_;
  OutputFile errors_;
  std::map<int64_t, Line> pending_;
  int64_t next_row_ = 0;
};

}  // namespace

std::string BatchService::BatchId(absl::string_view job_id) {
  return absl::StrCat(kBatchPrefix, job_id);
}

std::string BatchService::OutputFileId(absl::string_view job_id) {
  return absl::StrCat("file-", job_id, "-output");
}

std::string BatchService::ErrorFileId(absl::string_view job_id) {
  return absl::StrCat("file-", job_id, "-errors");
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
  constexpr int64_t kRowsAtOnce = 1024;
  const int64_t lines = (*file)->row_count();
  for (int64_t first = 0; first < lines; first += kRowsAtOnce) {
    SDG_ASSIGN_OR_RETURN(
        std::vector<google::protobuf::Struct> rows,
        (*file)->ReadRows(first, std::min(kRowsAtOnce, lines - first)));
    for (const auto& row : rows) SDG_RETURN_IF_ERROR(on_line(RowLine(row)));
  }
  return absl::OkStatus();
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
  view.expired = ExpiredByWindow(view.job);
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
    SDG_RETURN_IF_ERROR(Finalize(*job, view.job));
  } else if (!store_.FindUpload(OutputFileId(job->id())).ok()) {
    return view;
  }
  view.files_written = true;
  {
    absl::MutexLock lock(&cancels_mu_);
    cancel_times_.erase(job->id());
  }
  if (view.job.rows_succeeded() > 0) {
    view.output_file_id = OutputFileId(job->id());
  }
  if (view.job.rows_succeeded() < view.job.total_rows()) {
    view.error_file_id = ErrorFileId(job->id());
  }
  return view;
}

absl::Status BatchService::Finalize(Job& job, const v1::Job& described) {
  absl::MutexLock lock(&finalize_mu_);
  if (store_.FindUpload(OutputFileId(job.id())).ok()) return absl::OkStatus();
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Dataset> input,
                       store_.OpenJobDataset(job.id()));
  BatchFilesWriter writer(job.id(), *input);
  SDG_RETURN_IF_ERROR(writer.Open(store_));
  std::shared_ptr<EventLog> log = job.log();
  log->AwaitCommitted();
  SDG_ASSIGN_OR_RETURN(std::unique_ptr<EventLog::Reader> reader, log->Read(0));
  while (true) {
    SDG_ASSIGN_OR_RETURN(std::optional<EventLog::EncodedEvent> next,
                         reader->Next());
    if (!next.has_value()) break;
    if (next->event_case != LogEvent::kShardResult &&
        next->event_case != LogEvent::kShardError) {
      continue;
    }
    // Each event's rows in an arena, freed at once.
    google::protobuf::Arena arena;
    auto* event = google::protobuf::Arena::CreateMessage<LogEvent>(&arena);
    if (!event->ParseFromString(next->bytes)) {
      return absl::DataLossError(absl::StrCat(
          "event ", next->sequence, " of job ", job.id(), " is corrupt"));
    }
    SDG_RETURN_IF_ERROR(writer.Take(*event));
  }
  const absl::string_view code = ExpiredByWindow(described) ? "batch_expired"
                                 : described.state() == v1::JOB_STATE_CANCELLED
                                     ? "batch_cancelled"
                                     : "batch_failed";
  SDG_RETURN_IF_ERROR(writer.Finish(
      code, described.reason().empty() ? "the batch ended before this line ran"
                                       : described.reason()));
  // output_expires_after: from the files' creation, as OpenAI's anchor
  // "created_at" says; else they live as long as any file.
  const int64_t expires_after =
      job.spec().openai_batch->output_expires_after_seconds();
  SDG_RETURN_IF_ERROR(
      writer.Save(store_, job.tenant(),
                  expires_after > 0 ? absl::Now() + absl::Seconds(expires_after)
                                    : absl::InfiniteFuture()));
  Log(LogLevel::kInfo, "batch files written",
      {{"job_id", job.id()},
       {"tenant", job.tenant()},
       {"completed", described.rows_succeeded()},
       {"lines", input->row_count()}});
  return absl::OkStatus();
}

}  // namespace sdg
