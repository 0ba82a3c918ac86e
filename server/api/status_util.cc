#include "server/api/status_util.h"

#include <string>

namespace sdg {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace sdg
