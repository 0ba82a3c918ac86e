// The one place where absl::Status becomes grpc::Status (the RPC edge).
#ifndef SDG_SERVER_API_STATUS_UTIL_H_
#define SDG_SERVER_API_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace sdg {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace sdg

#endif  // SDG_SERVER_API_STATUS_UTIL_H_
