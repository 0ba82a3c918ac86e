#include "client/generate.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/grpc_status.h"
#include "client/ordered_output.h"
#include "client/pipeline_output.h"
#include "client/row_json.h"
#include "client/upload.h"
#include "google/protobuf/util/json_util.h"
#include "sdg/v1/block_defaults.h"

namespace sdg {
namespace {

// Progress on stderr: rewritten in place on a terminal, a line at a time
// (at most every few seconds) otherwise. Rates come from the server's
// progress events (they survive a reconnect); counts from the results.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(std::ostream& out)
      : out_(out), tty_(isatty(STDERR_FILENO) == 1) {}

  void SetRates(const v1::JobProgress& progress) {
    has_rates_ = true;
    rows_per_second_ = progress.rows_per_second();
    tokens_per_second_ = progress.tokens_per_second();
  }

  void Update(int64_t done, int64_t failed, int64_t total, bool force) {
    absl::Time now = absl::Now();
    absl::Duration every = tty_ ? absl::Milliseconds(200) : absl::Seconds(5);
    if (!force && now - last_ < every) return;
    if (done == printed_done_ && failed == printed_failed_) return;
    last_ = now;
    printed_done_ = done;
    printed_failed_ = failed;
    // A pipeline's rows out are not its seed rows: no total, no ETA.
    std::string line =
        total > 0
            ? absl::StrFormat("progress: %d/%d rows done, %d failed", done,
                              total, failed)
            : absl::StrFormat("progress: %d rows out, %d failed", done, failed);
    // The server measures rates over a second at least: until its first
    // progress event there is none to show (not a rate of 0).
    if (has_rates_) {
      absl::StrAppendFormat(&line, ", %.1f rows/s, %.0f tokens/s",
                            rows_per_second_, tokens_per_second_);
    }
    const int64_t left = total - done - failed;
    if (left > 0 && rows_per_second_ > 0) {
      absl::StrAppend(&line, ", ETA ",
                      absl::FormatDuration(absl::Seconds(std::lround(
                          static_cast<double>(left) / rows_per_second_))));
    }
    if (tty_) {
      out_ << '\r' << line << "\x1b[K" << std::flush;
      pending_newline_ = true;
    } else {
      out_ << line << '\n' << std::flush;
    }
  }
  // Before another line is printed under the progress line.
  void BreakLine() {
    if (pending_newline_) out_ << '\n';
    pending_newline_ = false;
  }
  ~ProgressPrinter() { BreakLine(); }

 private:
  std::ostream& out_;
  const bool tty_;
  bool pending_newline_ = false;
  bool has_rates_ = false;
  double rows_per_second_ = 0;
  double tokens_per_second_ = 0;
  absl::Time last_ = absl::InfinitePast();
  int64_t printed_done_ = -1;
  int64_t printed_failed_ = -1;
};

// A job id made by sdgctl, so that creating the job again after a lost
// answer attaches to it instead of making a second one.
std::string ClientJobId() {
  absl::BitGen bits;
  return absl::StrFormat("sdgctl-%016x", absl::Uniform<uint64_t>(bits));
}

}  // namespace

absl::StatusOr<v1::Block> LoadBlockFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  v1::Block block;
  auto status = google::protobuf::util::JsonStringToMessage(text.str(), &block);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a block (a JSON object with Block's fields): ",
        status.message().as_string()));
  }
  return block;
}

v1::GenerateJobRequest BuildRequest(const GenerateOptions& options,
                                    const std::string& dataset_id) {
  v1::GenerateJobRequest request;
  request.set_job_id(options.job_id);
  request.set_dataset_id(dataset_id);
  if (options.pipeline.has_value()) {
    *request.mutable_pipeline() = *options.pipeline;
    request.set_num_instructions_to_generate(
        options.num_instructions_to_generate);
  } else {
    *request.mutable_block() = options.block;
  }
  request.set_batch_size(options.batch_size);
  request.set_num_workers(options.num_workers);
  request.set_error_policy(options.fail_fast ? v1::ERROR_POLICY_FAIL_FAST
                                             : v1::ERROR_POLICY_CONTINUE);
  request.set_result_columns(options.result_columns);
  if (options.timeout.has_value()) {
    absl::Duration rest = *options.timeout;
    int64_t seconds = absl::IDivDuration(rest, absl::Seconds(1), &rest);
    request.mutable_timeout()->set_seconds(seconds);
    request.mutable_timeout()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(rest)));
  }
  return request;
}

absl::StatusOr<v1::Job> SubmitJob(grpc::Channel& channel,
                                  const GenerateOptions& options) {
  auto stub = v1::GenerationService::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  absl::StatusOr<v1::Dataset> dataset;
  grpc::Status uploaded =
      CallWithReconnect(options.follow, [&](grpc::ClientContext&) {
        dataset = UploadDatasetFile(*stub, options.input_path, "");
        return dataset.ok()
                   ? grpc::Status::OK
                   : grpc::Status(
                         static_cast<grpc::StatusCode>(dataset.status().code()),
                         std::string(dataset.status().message()));
      });
  if (!uploaded.ok()) return FromGrpcStatus(uploaded);
  GenerateOptions with_id = options;
  if (with_id.job_id.empty()) with_id.job_id = ClientJobId();
  const v1::GenerateJobRequest request =
      BuildRequest(with_id, dataset->dataset_id());
  v1::Job job;
  grpc::Status created =
      CallWithReconnect(options.follow, [&](grpc::ClientContext& context) {
        return stub->CreateJob(&context, request, &job);
      });
  if (!created.ok()) return FromGrpcStatus(created);
  return job;
}

namespace {

// The output and errors files. They are opened once the job exists
// (`started`, or `finished` for a job cancelled while queued), so that a
// rejected job leaves none.
class ResultFiles {
 public:
  ResultFiles(const GenerateOptions& options, std::string errors_path,
              const std::vector<JsonRow>& inputs)
      : output_path_(options.output_path),
        errors_path_(std::move(errors_path)),
        output_column_(v1::OutputColumnOf(options.block)),
        samples_(v1::SamplesPerRowOf(options.block)),
        pipeline_(options.pipeline.has_value()),
        inputs_(inputs) {}

  int samples() const { return samples_; }
  const std::string& output_path() const { return output_path_; }
  bool is_open() const { return ordered_ != nullptr || pipelined_ != nullptr; }

  // Idempotent; false if either file cannot be written.
  bool Open() {
    if (is_open()) return true;
    output_.open(output_path_, std::ios::trunc);
    errors_.open(errors_path_, std::ios::trunc);
    if (!output_ || !errors_) return false;
    if (pipeline_) {
      pipelined_ = std::make_unique<PipelineOutput>(output_, errors_);
    } else {
      ordered_ = std::make_unique<OrderedOutput>(inputs_, output_column_,
                                                 samples_, output_, errors_);
    }
    return true;
  }

  void AddResult(const v1::ShardResult& result) {
    if (ordered_ != nullptr) ordered_->AddResult(result);
    if (pipelined_ != nullptr) pipelined_->AddResult(result);
  }
  void AddError(const v1::ShardError& error) {
    if (ordered_ != nullptr) ordered_->AddError(error);
    if (pipelined_ != nullptr) pipelined_->AddError(error);
  }

  // Writes what came back (a pipeline's output whole, in order, now) and
  // closes both files. If the job ended, every row that never came back
  // goes to the errors file with `missing_reason`; if following ended
  // first, those rows are in neither file (summary.rows_pending counts
  // them).
  absl::Status Close(const std::optional<std::string>& missing_reason,
                     GenerateSummary& summary) {
    if (pipelined_ != nullptr) {
      pipelined_->Finish();
      summary.lines_written = pipelined_->lines_written();
      summary.rows_failed = pipelined_->rows_failed();
    } else {
      if (missing_reason.has_value()) {
        ordered_->FinishMissing(*missing_reason);
      } else {
        summary.rows_pending = ordered_->FinishPartial();
      }
      summary.lines_written = ordered_->lines_written();
      summary.rows_failed = ordered_->rows_failed();
    }
    output_.close();
    errors_.close();
    if (!output_ || !errors_) {
      return absl::DataLossError(
          absl::StrCat("error writing ", output_path_, " or ", errors_path_));
    }
    return absl::OkStatus();
  }

 private:
  const std::string output_path_;
  const std::string errors_path_;
  const std::string output_column_;
  const int samples_;
  const bool pipeline_;
  const std::vector<JsonRow>& inputs_;
  std::ofstream output_;
  std::ofstream errors_;
  std::unique_ptr<OrderedOutput> ordered_;
  std::unique_ptr<PipelineOutput> pipelined_;
};

// Rows, not samples: a row's samples may span events, so each row counts
// by its first.
int64_t RowsIn(const v1::ShardResult& result) {
  int64_t rows = 0;
  for (const v1::ResultRow& row : result.rows())
    rows += row.sample_index() == 0;
  return rows;
}

// Rows seen so far, for the progress line.
struct Tally {
  int64_t done = 0;
  int64_t failed = 0;
};

// Takes one event into the files, the tally and the summary. An error stops
// the call (the job is then cancelled).
absl::Status ApplyEvent(const v1::JobEvent& event, ResultFiles& files,
                        Tally& tally, GenerateSummary& summary,
                        ProgressPrinter& progress) {
  summary.job_id = event.job_id();
  switch (event.event_case()) {
    case v1::JobEvent::kStarted:
      break;
    case v1::JobEvent::kShardResult:
      files.AddResult(event.shard_result());
      tally.done += RowsIn(event.shard_result());
      progress.Update(tally.done, tally.failed,
                      summary.pipeline ? 0 : summary.total_rows, false);
      break;
    case v1::JobEvent::kShardError:
      files.AddError(event.shard_error());
      tally.failed += event.shard_error().row_count();
      progress.Update(tally.done, tally.failed,
                      summary.pipeline ? 0 : summary.total_rows, false);
      break;
    case v1::JobEvent::kFinished:
      summary.finished = event.finished();
      files.Open();
      break;
    case v1::JobEvent::kProgress:
      progress.SetRates(event.progress());
      break;
    case v1::JobEvent::EVENT_NOT_SET:
      break;
  }
  return absl::OkStatus();
}

// Why the rows that never came back are missing, if the job ended; nullopt
// if following ended before the job did (those rows have not failed).
std::optional<std::string> MissingRowsReason(const GenerateSummary& summary) {
  if (summary.finished.state() == v1::JOB_STATE_UNSPECIFIED) {
    return std::nullopt;
  }
  return absl::StrCat(
      "not generated: job ended ", v1::JobState_Name(summary.finished.state()),
      summary.finished.reason().empty() ? "" : ": ", summary.finished.reason());
}

}  // namespace

absl::StatusOr<GenerateSummary> RunGenerate(
    grpc::Channel& channel, const GenerateOptions& options,
    std::ostream& progress_out, CallStopper& stopper,
    absl::FunctionRef<void(const std::string& job_id)> on_created) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<JsonRow>> inputs =
      ReadJsonlRows(options.input_path);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<v1::Job> job = SubmitJob(channel, options);
  if (!job.ok()) return job.status();
  on_created(job->job_id());

  GenerateSummary summary;
  summary.job_id = job->job_id();
  summary.total_rows = static_cast<int64_t>(inputs->size());
  summary.pipeline = options.pipeline.has_value();
  summary.errors_path = options.errors_path.empty()
                            ? options.output_path + ".errors.jsonl"
                            : options.errors_path;
  ResultFiles files(options, summary.errors_path, *inputs);
  if (!files.Open()) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", options.output_path, " or ",
                     summary.errors_path, "; the job ", job->job_id(),
                     " runs on: sdgctl output ", job->job_id()));
  }
  ProgressPrinter progress(progress_out);
  Tally tally;
  absl::StatusOr<FollowResult> followed = FollowJob(
      channel, job->job_id(), 0, options.follow,
      [&](const v1::JobEvent& event) {
        return ApplyEvent(event, files, tally, summary, progress);
      },
      progress_out, &stopper);
  if (!followed.ok()) return followed.status();
  summary.call_status = followed->status;
  summary.reconnects = followed->reconnects;
  summary.client_elapsed_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  progress.Update(tally.done, tally.failed,
                  summary.pipeline ? 0 : summary.total_rows, true);
  progress.BreakLine();
  if (absl::Status closed = files.Close(MissingRowsReason(summary), summary);
      !closed.ok()) {
    return closed;
  }
  return summary;
}

absl::StatusOr<FollowResult> WatchWithProgress(grpc::Channel& channel,
                                               const std::string& job_id,
                                               const FollowOptions& options,
                                               std::ostream& progress_out,
                                               CallStopper& stopper) {
  ProgressPrinter progress(progress_out);
  int64_t total = 0;
  Tally tally;
  return FollowJob(
      channel, job_id, 0, options,
      [&](const v1::JobEvent& event) {
        switch (event.event_case()) {
          case v1::JobEvent::kStarted:
            total = event.started().total_rows();
            break;
          case v1::JobEvent::kShardResult:
            tally.done += RowsIn(event.shard_result());
            break;
          case v1::JobEvent::kShardError:
            tally.failed += event.shard_error().row_count();
            break;
          case v1::JobEvent::kProgress:
            progress.SetRates(event.progress());
            break;
          default:
            break;
        }
        progress.Update(tally.done, tally.failed, total, event.has_finished());
        return absl::OkStatus();
      },
      progress_out, &stopper);
}

std::string FormatFinishedRates(const v1::JobFinished& finished) {
  const v1::TokenUsage& usage = finished.usage();
  std::string text;
  // Over the job's whole run, however short.
  const double seconds = finished.elapsed_seconds();
  if (seconds > 0) {
    absl::StrAppendFormat(
        &text, " (%.1f rows/s, %.0f tokens/s)",
        static_cast<double>(finished.rows_succeeded()) / seconds,
        static_cast<double>(usage.completion_tokens()) / seconds);
  }
  absl::StrAppendFormat(&text, ", tokens: %d prompt + %d completion",
                        usage.prompt_tokens(), usage.completion_tokens());
  return text;
}

std::string FormatSummary(const GenerateSummary& summary,
                          const std::string& output_path) {
  const bool ended = summary.finished.state() != v1::JOB_STATE_UNSPECIFIED;
  std::string state =
      ended ? v1::JobState_Name(summary.finished.state())
            : absl::StrCat("call ended: ", summary.call_status.error_message());
  const int64_t generated =
      summary.total_rows - summary.rows_failed - summary.rows_pending;
  std::string text =
      summary.pipeline
          ? absl::StrFormat(
                "job %s %s: %d seed rows -> %s (%d rows), %d rows failed",
                summary.job_id, state, summary.total_rows, output_path,
                summary.lines_written, summary.rows_failed)
          : absl::StrFormat(
                "job %s %s: %d/%d rows generated -> %s (%d lines), %d failed",
                summary.job_id, state, generated, summary.total_rows,
                output_path, summary.lines_written, summary.rows_failed);
  if (summary.rows_failed > 0) {
    absl::StrAppend(&text, " -> ", summary.errors_path);
  }
  absl::StrAppendFormat(&text, ", %.2f s",
                        ended ? summary.finished.elapsed_seconds()
                              : summary.client_elapsed_seconds);
  if (ended) absl::StrAppend(&text, FormatFinishedRates(summary.finished));
  if (!summary.finished.reason().empty()) {
    absl::StrAppend(&text, " (", summary.finished.reason(), ")");
  }
  if (!ended) {
    // The job is stored on sdgd: it runs on, or resumes when sdgd is back.
    absl::StrAppend(
        &text,
        summary.pipeline ? "; the job has not ended"
                         : absl::StrFormat("; %d rows not yet generated",
                                           summary.rows_pending),
        " (they have not failed): the job runs on, or resumes when sdgd "
        "starts again; follow it with sdgctl watch ",
        summary.job_id, " and fetch every row with sdgctl output ",
        summary.job_id, " -o FILE");
  }
  return text;
}

}  // namespace sdg
