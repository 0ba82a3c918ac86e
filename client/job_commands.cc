#include "client/job_commands.h"

#include <grpcpp/grpcpp.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/grpc_status.h"
#include "client/ordered_output.h"
#include "client/pipeline_output.h"
#include "google/protobuf/util/json_util.h"
#include "sdg/v1/block_defaults.h"

namespace sdg {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(30);

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

void PrintJob(const v1::Job& job, std::ostream& out) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(job, &json, print);
  out << json;
}

absl::StatusOr<v1::Job> FetchJob(v1::GenerationService::StubInterface& stub,
                                 const std::string& job_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = stub.GetJob(&context, request, &job);
  if (!status.ok()) return FromGrpcStatus(status);
  return job;
}

}  // namespace

absl::Status UsageCommand(v1::GenerationService::StubInterface& stub,
                          std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::StorageUsage usage;
  grpc::Status status = stub.GetStorageUsage(&context, {}, &usage);
  if (!status.ok()) return FromGrpcStatus(status);
  auto mib = [](int64_t bytes) {
    return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  };
  out << "tenant " << (usage.tenant().empty() ? "-" : usage.tenant()) << ": "
      << mib(usage.total_bytes())
      << (usage.quota_bytes() > 0
              ? absl::StrCat(" of ", mib(usage.quota_bytes()), " (",
                             usage.total_bytes() * 100 / usage.quota_bytes(),
                             "%)")
              : std::string(" (no quota)"))
      << "\n  uploads       " << mib(usage.upload_bytes())
      << "\n  job datasets  " << mib(usage.dataset_bytes())
      << "\n  job results   " << mib(usage.result_bytes()) << "\n";
  return absl::OkStatus();
}

absl::Status ListJobsCommand(v1::GenerationService::StubInterface& stub,
                             const std::string& state, std::ostream& out) {
  v1::ListJobsRequest request;
  if (!state.empty()) {
    v1::JobState parsed;
    if (!v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(state),
                            &parsed)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state must be queued, running, succeeded, failed, cancelled or "
          "suspended, got \"",
          state, "\""));
    }
    request.set_state(parsed);
  }
  out << absl::StrFormat("%-24s %-10s %-12s %10s %10s %10s %13s %13s %7s  %s\n",
                         "JOB_ID", "STATE", "TENANT", "ROWS", "SUCCEEDED",
                         "FAILED", "PROMPT_TOKENS", "OUTPUT_TOKENS", "RESUMED",
                         "BLOCK");
  do {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::ListJobsResponse response;
    grpc::Status status = stub.ListJobs(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    for (const v1::Job& job : response.jobs()) {
      // "-": a server without tenants (no --auth_tokens_file).
      out << absl::StrFormat(
          "%-24s %-10s %-12s %10d %10d %10d %13d %13d %7d  %s\n", job.job_id(),
          StateName(job.state()), job.tenant().empty() ? "-" : job.tenant(),
          job.total_rows(), job.rows_succeeded(), job.rows_failed(),
          job.usage().prompt_tokens(), job.usage().completion_tokens(),
          job.resumed(),
          job.pipeline_steps() > 0
              ? absl::StrCat("pipeline of ", job.pipeline_steps(), " steps")
              : job.block_name());
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return absl::OkStatus();
}

absl::Status GetJobCommand(v1::GenerationService::StubInterface& stub,
                           const std::string& job_id, std::ostream& out) {
  absl::StatusOr<v1::Job> job = FetchJob(stub, job_id);
  if (!job.ok()) return job.status();
  PrintJob(*job, out);
  return absl::OkStatus();
}

absl::Status CancelJobCommand(v1::GenerationService::StubInterface& stub,
                              const std::string& job_id, std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = stub.CancelJob(&context, request, &job);
  if (!status.ok()) return FromGrpcStatus(status);
  PrintJob(job, out);
  return absl::OkStatus();
}

absl::Status DeleteJobCommand(v1::GenerationService::StubInterface& stub,
                              const std::string& job_id, std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  google::protobuf::Empty empty;
  grpc::Status status = stub.DeleteJob(&context, request, &empty);
  if (!status.ok()) return FromGrpcStatus(status);
  out << "deleted job " << job_id << "\n";
  return absl::OkStatus();
}

absl::Status OutputCommand(grpc::Channel& channel, const std::string& job_id,
                           const std::string& output_path,
                           const std::string& errors_path,
                           const FollowOptions& follow, std::ostream& log) {
  auto stub = v1::GenerationService::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  absl::StatusOr<v1::Job> fetched = FetchJob(*stub, job_id);
  if (!fetched.ok()) return fetched.status();
  const v1::Job& job = *fetched;
  std::ofstream output(output_path, std::ios::trunc);
  std::ofstream errors(errors_path, std::ios::trunc);
  if (!output || !errors) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", output_path, " or ", errors_path));
  }
  OrderedOutput ordered(job.total_rows(), v1::OutputColumnOf(job.block()),
                        v1::SamplesPerRowOf(job.block()), output, errors);
  // A pipeline's rows are written in their order once all have come.
  PipelineOutput pipelined(output, errors);
  const bool pipeline = job.pipeline_steps() > 0;
  absl::StatusOr<FollowResult> followed = FollowJob(
      channel, job_id, 0, follow,
      [&](const v1::JobEvent& event) {
        if (event.has_shard_result()) {
          if (pipeline) {
            pipelined.AddResult(event.shard_result());
          } else {
            ordered.AddResult(event.shard_result());
          }
        }
        if (event.has_shard_error()) {
          if (pipeline) {
            pipelined.AddError(event.shard_error());
          } else {
            ordered.AddError(event.shard_error());
          }
        }
        return absl::OkStatus();
      },
      log);
  if (!followed.ok()) return followed.status();
  int64_t lines_written = 0;
  int64_t rows_failed = 0;
  int64_t rows_pending = 0;  // not yet generated: in neither file
  if (pipeline) {
    pipelined.Finish();
    lines_written = pipelined.lines_written();
    rows_failed = pipelined.rows_failed();
  } else {
    if (followed->finished.has_value()) {
      ordered.FinishMissing(absl::StrCat(
          "not generated: job ended ", StateName(followed->finished->state())));
    } else {
      rows_pending = ordered.FinishPartial();
    }
    lines_written = ordered.lines_written();
    rows_failed = ordered.rows_failed();
  }
  output.close();
  errors.close();
  if (!output || !errors) {
    return absl::DataLossError(
        absl::StrCat("error writing ", output_path, " or ", errors_path));
  }
  log << absl::StrFormat(
      "job %s %s: %d lines -> %s, %d failed rows -> %s\n", job_id,
      followed->finished.has_value() ? StateName(followed->finished->state())
                                     : "(unfinished)",
      lines_written, output_path, rows_failed, errors_path);
  if (!followed->finished.has_value()) {
    log << absl::StrFormat(
        "sdgctl: %d rows not yet generated (they have not failed): the job "
        "runs on, or resumes when sdgd starts again; run sdgctl output %s "
        "again once it has ended\n",
        rows_pending, job_id);
    return FromGrpcStatus(followed->status);
  }
  if (rows_failed > 0) {
    return absl::AbortedError(absl::StrCat(
        rows_failed, " rows were not generated; see ", errors_path));
  }
  return absl::OkStatus();
}

}  // namespace sdg
