#include "client/generate.h"

#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/grpc_status.h"
#include "client/ordered_output.h"
#include "client/row_json.h"
#include "google/protobuf/util/json_util.h"

namespace sdg {
namespace {

// Progress on stderr: rewritten in place on a terminal, a line at a time
// (at most every few seconds) otherwise.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(std::ostream& out)
      : out_(out), tty_(isatty(STDERR_FILENO) == 1) {}

  void Update(int64_t done, int64_t failed, int64_t total, bool force) {
    absl::Time now = absl::Now();
    absl::Duration every = tty_ ? absl::Milliseconds(200) : absl::Seconds(5);
    if (!force && now - last_ < every) return;
    if (done == printed_done_ && failed == printed_failed_) return;
    last_ = now;
    printed_done_ = done;
    printed_failed_ = failed;
    double seconds = absl::ToDoubleSeconds(now - start_);
    std::string line = absl::StrFormat(
        "progress: %d/%d rows done, %d failed, %.1f rows/s", done, total,
        failed, seconds > 0 ? done / seconds : 0.0);
    if (tty_) {
      out_ << '\r' << line << "\x1b[K" << std::flush;
      pending_newline_ = true;
    } else {
      out_ << line << '\n' << std::flush;
    }
  }
  ~ProgressPrinter() {
    if (pending_newline_) out_ << '\n';
  }

 private:
  std::ostream& out_;
  const bool tty_;
  bool pending_newline_ = false;
  absl::Time start_ = absl::Now();
  absl::Time last_ = absl::InfinitePast();
  int64_t printed_done_ = -1;
  int64_t printed_failed_ = -1;
};

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

absl::StatusOr<GenerateSummary> RunGenerate(
    v1::GenerationService::StubInterface& stub, grpc::ClientContext& context,
    const GenerateOptions& options, std::ostream& progress_out) {
  absl::StatusOr<std::vector<JsonRow>> inputs =
      ReadJsonlRows(options.input_path);
  if (!inputs.ok()) return inputs.status();

  v1::GenerateJobRequest request;
  request.set_job_id(options.job_id);
  *request.mutable_block() = options.block;
  request.set_batch_size(options.batch_size);
  request.set_num_workers(options.num_workers);
  request.set_error_policy(options.fail_fast ? v1::ERROR_POLICY_FAIL_FAST
                                             : v1::ERROR_POLICY_CONTINUE);
  if (options.timeout.has_value()) {
    absl::Duration rest = *options.timeout;
    int64_t seconds = absl::IDivDuration(rest, absl::Seconds(1), &rest);
    request.mutable_timeout()->set_seconds(seconds);
    request.mutable_timeout()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(rest)));
  }
  request.mutable_rows()->Reserve(static_cast<int>(inputs->size()));
  for (const JsonRow& row : *inputs) *request.add_rows() = JsonToStruct(row);

  GenerateSummary summary;
  summary.total_rows = static_cast<int64_t>(inputs->size());
  summary.errors_path = options.errors_path.empty()
                            ? options.output_path + ".errors.jsonl"
                            : options.errors_path;
  const std::string output_column = options.block.output_column().empty()
                                        ? "output"
                                        : options.block.output_column();
  const int samples = options.block.n() > 0 ? options.block.n() : 1;

  // Files are opened once the job exists (`started`, or `finished` for a job
  // cancelled while queued): a rejected job leaves none.
  std::ofstream output;
  std::ofstream errors;
  std::unique_ptr<OrderedOutput> ordered;
  auto open_outputs = [&]() -> bool {
    if (ordered) return true;
    output.open(options.output_path, std::ios::trunc);
    errors.open(summary.errors_path, std::ios::trunc);
    if (!output || !errors) return false;
    ordered = std::make_unique<OrderedOutput>(*inputs, output_column, samples,
                                              output, errors);
    return true;
  };
  ProgressPrinter progress(progress_out);
  int64_t done = 0;
  int64_t failed = 0;

  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      stub.GenerateJob(&context, request);
  v1::JobEvent event;
  while (reader->Read(&event)) {
    summary.job_id = event.job_id();
    switch (event.event_case()) {
      case v1::JobEvent::kStarted:
        if (!open_outputs()) {
          context.TryCancel();
          return absl::PermissionDeniedError(
              absl::StrCat("cannot write ", options.output_path, " or ",
                           summary.errors_path, "; the job was cancelled"));
        }
        break;
      case v1::JobEvent::kShardResult:
        if (ordered) ordered->AddResult(event.shard_result());
        done += event.shard_result().rows_size() / samples;
        progress.Update(done, failed, summary.total_rows, false);
        break;
      case v1::JobEvent::kShardError:
        if (ordered) ordered->AddError(event.shard_error());
        failed += event.shard_error().row_count();
        progress.Update(done, failed, summary.total_rows, false);
        break;
      case v1::JobEvent::kProgress:
        break;
      case v1::JobEvent::kFinished:
        summary.finished = event.finished();
        open_outputs();
        break;
      case v1::JobEvent::EVENT_NOT_SET:
        break;
    }
  }
  summary.call_status = reader->Finish();
  if (!ordered) {
    // The job never started: the server rejected it.
    if (!summary.call_status.ok()) return FromGrpcStatus(summary.call_status);
    return absl::InternalError("the stream ended before the job started");
  }
  progress.Update(done, failed, summary.total_rows, true);

  std::string reason;
  if (summary.finished.state() != v1::JOB_STATE_UNSPECIFIED) {
    reason = absl::StrCat("not generated: job ended ",
                          v1::JobState_Name(summary.finished.state()),
                          summary.finished.reason().empty() ? "" : ": ",
                          summary.finished.reason());
  } else {
    reason = absl::StrCat("not generated: the call ended with ",
                          summary.call_status.error_message());
  }
  ordered->FinishMissing(reason);
  summary.lines_written = ordered->lines_written();
  summary.rows_failed = ordered->rows_failed();
  output.close();
  errors.close();
  if (!output || !errors) {
    return absl::DataLossError(absl::StrCat(
        "error writing ", options.output_path, " or ", summary.errors_path));
  }
  return summary;
}

std::string FormatSummary(const GenerateSummary& summary,
                          const std::string& output_path) {
  std::string state =
      summary.finished.state() != v1::JOB_STATE_UNSPECIFIED
          ? v1::JobState_Name(summary.finished.state())
          : absl::StrCat("call ended: ", summary.call_status.error_message());
  std::string text = absl::StrFormat(
      "job %s %s: %d/%d rows generated -> %s (%d lines), %d failed",
      summary.job_id, state, summary.total_rows - summary.rows_failed,
      summary.total_rows, output_path, summary.lines_written,
      summary.rows_failed);
  if (summary.rows_failed > 0) {
    absl::StrAppend(&text, " -> ", summary.errors_path);
  }
  absl::StrAppendFormat(&text, ", %.2f s", summary.finished.elapsed_seconds());
  if (!summary.finished.reason().empty()) {
    absl::StrAppend(&text, " (", summary.finished.reason(), ")");
  }
  return text;
}

}  // namespace sdg
