#include "client/job_commands.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/grpc_status.h"
#include "google/protobuf/util/json_util.h"

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

}  // namespace

absl::Status ListJobsCommand(v1::GenerationService::StubInterface& stub,
                             std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ListJobsResponse response;
  grpc::Status status =
      stub.ListJobs(&context, v1::ListJobsRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  out << absl::StrFormat("%-20s %-10s %10s %10s %10s  %s\n", "JOB_ID", "STATE",
                         "ROWS", "SUCCEEDED", "FAILED", "BLOCK");
  for (const v1::Job& job : response.jobs()) {
    out << absl::StrFormat("%-20s %-10s %10d %10d %10d  %s\n", job.job_id(),
                           StateName(job.state()), job.total_rows(),
                           job.rows_succeeded(), job.rows_failed(),
                           job.block_name());
  }
  return absl::OkStatus();
}

absl::Status GetJobCommand(v1::GenerationService::StubInterface& stub,
                           const std::string& job_id, std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = stub.GetJob(&context, request, &job);
  if (!status.ok()) return FromGrpcStatus(status);
  PrintJob(job, out);
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

}  // namespace sdg
