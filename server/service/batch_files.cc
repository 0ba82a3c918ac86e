#include "server/service/batch_files.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/struct.pb.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "server/jobs/batch_line.h"
#include "server/service/file_upload.h"

namespace sdg {

// One file of a batch's output being written: its lines as rows, and its
// size and digest as they go.
class OutputFile {
 public:
  OutputFile(std::string file_id, std::string filename)
      : file_id_(std::move(file_id)), filename_(std::move(filename)) {}

  const std::string& file_id() const { return file_id_; }

  // What a crash or an error left goes first: rows, and a record saved
  // (the error file's is saved before the output file's; the files are
  // written only while the output file's is not).
  absl::Status Open(DatasetStore& store) {
    if (absl::Status removed = store.RemoveUpload(file_id_);
        !removed.ok() && !absl::IsNotFound(removed)) {
      return removed;
    }
    store.DiscardUpload(file_id_);
    SDG_ASSIGN_OR_RETURN(builder_, store.NewUpload(file_id_));
    return absl::OkStatus();
  }
  absl::Status Add(const std::string& line) {
    ++count_.lines;
    count_.bytes += static_cast<int64_t>(line.size()) + 1;
    count_.sha256.Update(line);
    count_.sha256.Update("\n");
    SetLineRow(line, row_);
    return builder_->Add(row_);
  }
  absl::Status Save(DatasetStore& store, const std::string& tenant,
                    absl::Time expire_time) {
    StoredDataset record;
    record.dataset.set_dataset_id(file_id_);
    record.dataset.set_filename(filename_);
    record.dataset.set_purpose("batch_output");
    record.tenant = tenant;
    record.expire_time = expire_time;
    return SaveBatchFile(store, *builder_, std::move(record), count_).status();
  }

 private:
  const std::string file_id_;
  const std::string filename_;
  std::unique_ptr<DatasetBuilder> builder_;
  google::protobuf::Struct row_;  // reused from line to line
  FileCount count_;
};

bool BatchFiles::ExpiredByWindow(v1::JobState state, absl::string_view reason) {
  return state == v1::JOB_STATE_FAILED &&
         absl::StrContains(reason, "timeout of");
}

absl::StatusOr<std::unique_ptr<BatchFiles>> BatchFiles::Open(
    DatasetStore& store, Batch batch, std::shared_ptr<Dataset> input,
    const std::shared_ptr<EventLog>& log, size_t max_waiting_bytes) {
  SDG_ASSIGN_OR_RETURN(std::unique_ptr<EventLog::Reader> reader, log->Read(0));
  std::unique_ptr<BatchFiles> files(
      new BatchFiles(store, std::move(batch), std::move(input),
                     std::move(reader), max_waiting_bytes));
  SDG_RETURN_IF_ERROR(files->output_->Open(store));
  SDG_RETURN_IF_ERROR(files->errors_->Open(store));
  return files;
}

BatchFiles::BatchFiles(DatasetStore& store, Batch batch,
                       std::shared_ptr<Dataset> input,
                       std::unique_ptr<EventLog::Reader> reader,
                       size_t max_waiting_bytes)
    : store_(store),
      batch_(std::move(batch)),
      input_(std::move(input)),
      max_waiting_bytes_(max_waiting_bytes),
      reader_(std::move(reader)),
      output_(std::make_unique<OutputFile>(
          OutputFileId(batch_.job_id),
          absl::StrCat("batch_", batch_.job_id, "_output.jsonl"))),
      errors_(std::make_unique<OutputFile>(
          ErrorFileId(batch_.job_id),
          absl::StrCat("batch_", batch_.job_id, "_error.jsonl"))),
      answered_(static_cast<size_t>(input_->row_count()), false) {}

BatchFiles::~BatchFiles() {
  if (!saved_ && error_.ok()) Discard();
}

std::string BatchFiles::OutputFileId(absl::string_view job_id) {
  return absl::StrCat("file-", job_id, "-output");
}

std::string BatchFiles::ErrorFileId(absl::string_view job_id) {
  return absl::StrCat("file-", job_id, "-errors");
}

void BatchFiles::Discard() {
  const std::string output = output_->file_id();
  const std::string errors = errors_->file_id();
  output_.reset();  // the builders first: they write where DiscardUpload
  errors_.reset();  // removes
  store_.DiscardUpload(output);
  store_.DiscardUpload(errors);
}

absl::StatusOr<BatchFiles::Progress> BatchFiles::CatchUp() {
  if (!error_.ok()) return error_;
  if (saved_) return Progress::kSaved;
  absl::Status taken = [this]() -> absl::Status {
    while (true) {
      SDG_ASSIGN_OR_RETURN(std::optional<EventLog::EncodedEvent> next,
                           reader_->Next());
      if (!next.has_value()) break;
      SDG_RETURN_IF_ERROR(Take(*next));
    }
    if (finished_.has_value() && finished_->line_errors_size() == 0) {
      return Complete();
    }
    return absl::OkStatus();
  }();
  if (!taken.ok()) {
    Discard();
    error_ = taken;
    return taken;
  }
  if (saved_) return Progress::kSaved;
  // A batch whose lines failed validation has no files: its errors are in
  // the batch object.
  return reader_->End().has_value() ? Progress::kNone : Progress::kFollowing;
}

absl::Status BatchFiles::Take(const EventLog::EncodedEvent& encoded) {
  switch (encoded.event_case) {
    case LogEvent::kShardResult:
    case LogEvent::kShardError: {
      // Each event's rows in an arena, freed at once.
      google::protobuf::Arena arena;
      auto* event = google::protobuf::Arena::CreateMessage<LogEvent>(&arena);
      if (!event->ParseFromString(encoded.bytes)) break;
      return TakeRows(*event);
    }
    case LogEvent::kFinished: {
      LogEvent event;
      if (!event.ParseFromString(encoded.bytes)) break;
      finished_ = std::move(*event.mutable_finished());
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(
      "event ", encoded.sequence, " of job ", batch_.job_id, " is corrupt"));
}

absl::Status BatchFiles::TakeRows(const LogEvent& event) {
  if (event.has_shard_result()) {
    for (const v1::ResultRow& row : event.shard_result().rows()) {
      if (!Answered(row.row_index())) continue;
      const auto& columns = row.columns().fields();
      auto text = [&columns](const char* name) -> const std::string& {
        static const std::string kNone;
        auto it = columns.find(name);
        return it == columns.end() ? kNone : it->second.string_value();
      };
      const auto status = columns.find("status_code");
      SDG_RETURN_IF_ERROR(Place(
          row.row_index(),
          Line{true, BatchOutputLine(
                         batch_.job_id, row.row_index(), text("custom_id"),
                         status == columns.end()
                             ? 200
                             : static_cast<int>(status->second.number_value()),
                         text("request_id"), text("body"))}));
    }
  } else {
    const v1::ShardError& error = event.shard_error();
    const std::string code =
        error.http_status() == 0
            ? absl::AsciiStrToLower(absl::StatusCodeToString(
                  static_cast<absl::StatusCode>(error.code())))
        : error.http_status() < 500 ? "invalid_request_error"
                                    : "server_error";
    for (int64_t r = error.first_row();
         r < error.first_row() + error.row_count(); ++r) {
      if (!Answered(r)) continue;
      SDG_ASSIGN_OR_RETURN(std::string custom_id, CustomIdAt(r));
      SDG_RETURN_IF_ERROR(Place(
          r, Line{false,
                  BatchErrorLine(batch_.job_id, r, custom_id,
                                 error.http_status(), code, error.message())}));
    }
  }
  return WriteWaiting();
}

bool BatchFiles::Answered(int64_t row) {
  // Out of range: not a line of this file; below next_row_: written.
  if (row < next_row_ || row >= input_->row_count()) return false;
  answered_[static_cast<size_t>(row)] = true;
  return true;
}

absl::Status BatchFiles::Place(int64_t row, Line line) {
  if (row == next_row_) {
    SDG_RETURN_IF_ERROR(Write(line));
    ++next_row_;
    return absl::OkStatus();
  }
  if (waiting_.contains(row)) return absl::OkStatus();  // read again
  // Past the bound, the lines furthest ahead are let go: the log is read
  // again for them once the lines before them are written.
  const size_t size = line.text.size();
  while (!waiting_.empty() && waiting_bytes_ + size > max_waiting_bytes_) {
    auto last = std::prev(waiting_.end());
    if (last->first < row) return absl::OkStatus();
    waiting_bytes_ -= last->second.text.size();
    waiting_.erase(last);
  }
  waiting_bytes_ += size;
  waiting_.emplace(row, std::move(line));
  return absl::OkStatus();
}

absl::Status BatchFiles::WriteWaiting() {
  for (auto it = waiting_.begin();
       it != waiting_.end() && it->first == next_row_;
       it = waiting_.erase(it), ++next_row_) {
    waiting_bytes_ -= it->second.text.size();
    SDG_RETURN_IF_ERROR(Write(it->second));
  }
  return absl::OkStatus();
}

absl::Status BatchFiles::Complete() {
  const v1::JobFinished& finished = *finished_;
  const absl::string_view code =
      ExpiredByWindow(finished.state(), finished.reason()) ? "batch_expired"
      : finished.state() == v1::JOB_STATE_CANCELLED        ? "batch_cancelled"
                                                           : "batch_failed";
  const std::string message = finished.reason().empty()
                                  ? "the batch ended before this line ran"
                                  : finished.reason();
  while (true) {
    // In order: the lines kept, and those no event answered.
    while (next_row_ < input_->row_count()) {
      if (!waiting_.empty() && waiting_.begin()->first == next_row_) {
        SDG_RETURN_IF_ERROR(WriteWaiting());
        continue;
      }
      if (answered_[static_cast<size_t>(next_row_)]) break;  // let go
      SDG_ASSIGN_OR_RETURN(std::string custom_id, CustomIdAt(next_row_));
      SDG_RETURN_IF_ERROR(errors_->Add(BatchErrorLine(
          batch_.job_id, next_row_, custom_id, 0, code, message)));
      ++next_row_;
    }
    if (next_row_ == input_->row_count()) break;
    // Lines were let go: the log again, from the first not written. Each
    // pass writes at least that one.
    ++passes_;
    SDG_ASSIGN_OR_RETURN(std::unique_ptr<EventLog::Reader> again,
                         reader_->log().Read(0));
    while (true) {
      SDG_ASSIGN_OR_RETURN(std::optional<EventLog::EncodedEvent> next,
                           again->Next());
      if (!next.has_value()) break;
      if (next->event_case == LogEvent::kShardResult ||
          next->event_case == LogEvent::kShardError) {
        SDG_RETURN_IF_ERROR(Take(*next));
      }
    }
  }
  // output_expires_after counts from the files' creation, as OpenAI's
  // anchor "created_at" says.
  const absl::Time expire_time =
      batch_.output_expires_after_seconds > 0
          ? absl::Now() + absl::Seconds(batch_.output_expires_after_seconds)
          : absl::InfiniteFuture();
  // The error file first: the output file's record says both are stored.
  SDG_RETURN_IF_ERROR(errors_->Save(store_, batch_.tenant, expire_time));
  SDG_RETURN_IF_ERROR(output_->Save(store_, batch_.tenant, expire_time));
  saved_ = true;
  Log(LogLevel::kInfo, "batch files written",
      {{"job_id", batch_.job_id},
       {"tenant", batch_.tenant},
       {"completed", finished.rows_succeeded()},
       {"lines", input_->row_count()},
       {"log_read_again", passes_}});
  return absl::OkStatus();
}

absl::Status BatchFiles::Write(const Line& line) {
  return line.succeeded ? output_->Add(line.text) : errors_->Add(line.text);
}

absl::StatusOr<std::string> BatchFiles::CustomIdAt(int64_t row) const {
  std::string custom_id;
  SDG_RETURN_IF_ERROR(
      ReadFileLines(*input_, row, 1, [&custom_id](absl::string_view line) {
        custom_id = CustomIdOf(line);
        return absl::OkStatus();
      }));
  return custom_id;
}

}  // namespace sdg
