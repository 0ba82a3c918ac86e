// `sdgctl jobs`, `sdgctl get JOB_ID`, `sdgctl cancel JOB_ID`.
#ifndef SDG_CLIENT_JOB_COMMANDS_H_
#define SDG_CLIENT_JOB_COMMANDS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "sdg/v1/generation.grpc.pb.h"

namespace sdg {

// A table, one job a line, oldest first.
absl::Status ListJobsCommand(v1::GenerationService::StubInterface& stub,
                             std::ostream& out);
// The job as JSON.
absl::Status GetJobCommand(v1::GenerationService::StubInterface& stub,
                           const std::string& job_id, std::ostream& out);
absl::Status CancelJobCommand(v1::GenerationService::StubInterface& stub,
                              const std::string& job_id, std::ostream& out);

}  // namespace sdg

#endif  // SDG_CLIENT_JOB_COMMANDS_H_
