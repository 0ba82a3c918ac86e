// The one place where sdgctl turns a grpc::Status into an absl::Status.
#ifndef SDG_CLIENT_GRPC_STATUS_H_
#define SDG_CLIENT_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace sdg {

// gRPC and absl share the canonical code numbering.
inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace sdg

#endif  // SDG_CLIENT_GRPC_STATUS_H_
