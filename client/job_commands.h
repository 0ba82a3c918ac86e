// `sdgctl jobs`, `get`, `cancel`, `delete` and `output`.
#ifndef SDG_CLIENT_JOB_COMMANDS_H_
#define SDG_CLIENT_JOB_COMMANDS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "client/job_follow.h"
#include "sdg/v1/generation.grpc.pb.h"

namespace sdg {

// A table, one job a line, oldest first, every page; `state` filters
// ("RUNNING", "succeeded"...; empty: all).
absl::Status ListJobsCommand(v1::GenerationService::StubInterface& stub,
                             const std::string& state, std::ostream& out);
// The job as JSON.
absl::Status GetJobCommand(v1::GenerationService::StubInterface& stub,
                           const std::string& job_id, std::ostream& out);
absl::Status CancelJobCommand(v1::GenerationService::StubInterface& stub,
                              const std::string& job_id, std::ostream& out);
absl::Status DeleteJobCommand(v1::GenerationService::StubInterface& stub,
                              const std::string& job_id, std::ostream& out);
// What the caller's tenant holds in the store, against its quota.
absl::Status UsageCommand(v1::GenerationService::StubInterface& stub,
                          std::ostream& out);

// Writes a job's results in row order to `output_path` and its failed rows
// to `errors_path`, following the job to its end if it is still running.
// Without the input file, lines hold the columns sdgd returns, keys sorted.
// OK only if every row was generated.
absl::Status OutputCommand(grpc::Channel& channel, const std::string& job_id,
                           const std::string& output_path,
                           const std::string& errors_path,
                           const FollowOptions& follow, std::ostream& log);

}  // namespace sdg

#endif  // SDG_CLIENT_JOB_COMMANDS_H_
