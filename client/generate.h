// `sdgctl generate`: uploads a JSON-lines dataset, creates a job for it and
// follows the job's events (across restarts of sdgd), writing the results in
// input order and failed rows to an errors file.
#ifndef SDG_CLIENT_GENERATE_H_
#define SDG_CLIENT_GENERATE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/job_follow.h"
#include "sdg/v1/generation.grpc.pb.h"

namespace sdg {

struct GenerateOptions {
  std::string input_path;
  std::string output_path;
  // Empty means output_path + ".errors.jsonl".
  std::string errors_path;
  v1::Block block;
  // Instead of the block (sdgctl generate --pipeline).
  std::optional<v1::Pipeline> pipeline;
  int num_instructions_to_generate = 0;
  std::string job_id;
  int batch_size = 0;
  int num_workers = 0;
  bool fail_fast = false;
  // OUTPUT_ONLY when sdgctl joins the results with its own copy of the input
  // (generate); ALL when another command may fetch them (submit, generate
  // --detach).
  v1::ResultColumns result_columns = v1::RESULT_COLUMNS_ALL;
  std::optional<absl::Duration> timeout;
  FollowOptions follow;
};

struct GenerateSummary {
  std::string job_id;
  v1::JobFinished finished;  // state UNSPECIFIED if following ended without it
  grpc::Status call_status;
  int reconnects = 0;
  int64_t total_rows = 0;
  bool pipeline = false;  // lines_written then counts the pipeline's rows
  int64_t lines_written = 0;
  int64_t rows_failed = 0;  // rows written to the errors file
  // Rows not yet generated when following ended before the job did: in
  // neither file, since they have not failed (the job runs on, or resumes
  // when sdgd is back).
  int64_t rows_pending = 0;
  std::string errors_path;
  // From submitting to the end of following: what the summary shows when
  // the job's own `finished` never came.
  double client_elapsed_seconds = 0;

  bool AllRowsSucceeded() const {
    return call_status.ok() && finished.state() == v1::JOB_STATE_SUCCEEDED &&
           rows_failed == 0;
  }
};

// Reads a block file: a JSON object with Block's fields (snake_case or
// lowerCamelCase), e.g. {"model": "m", "prompt_template": "Q: {{question}}"}.
absl::StatusOr<v1::Block> LoadBlockFile(const std::string& path);

// The request `generate` and `submit` send for `dataset_id`.
v1::GenerateJobRequest BuildRequest(const GenerateOptions& options,
                                    const std::string& dataset_id);

// Uploads the input and creates the job (again, with the same job_id, if
// sdgd restarts meanwhile). Returns the job as created.
absl::StatusOr<v1::Job> SubmitJob(grpc::Channel& channel,
                                  const GenerateOptions& options);

// Fails before the job exists if the input file is unreadable or not JSON
// lines, and when the server rejects the job (its status, e.g.
// INVALID_ARGUMENT). Otherwise returns what happened, including a job that
// failed or was cancelled. `on_created` runs once the job exists (so that
// Ctrl-C can cancel it); `stopper` stops following. Progress goes to
// `progress`.
absl::StatusOr<GenerateSummary> RunGenerate(
    grpc::Channel& channel, const GenerateOptions& options,
    std::ostream& progress, CallStopper& stopper,
    absl::FunctionRef<void(const std::string& job_id)> on_created);

// Follows a job to its end with the progress line (`sdgctl watch`).
absl::StatusOr<FollowResult> WatchWithProgress(grpc::Channel& channel,
                                               const std::string& job_id,
                                               const FollowOptions& options,
                                               std::ostream& progress,
                                               CallStopper& stopper);

// " (R rows/s, T tokens/s), tokens: P prompt + C completion": the ended
// job's rates over its whole run and its token totals.
std::string FormatFinishedRates(const v1::JobFinished& finished);

// One line: "job ID SUCCEEDED: 100/100 rows -> out.jsonl (100 lines), ...".
std::string FormatSummary(const GenerateSummary& summary,
                          const std::string& output_path);

}  // namespace sdg

#endif  // SDG_CLIENT_GENERATE_H_
