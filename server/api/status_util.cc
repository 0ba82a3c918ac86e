#include "server/api/status_util.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/store/event_log.h"

namespace sdg {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  // This replica lost its jobs to another one: the client calls again, and
  // reaches the replica that runs them now.
  if (IsFencedOut(status)) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat(status.message(),
                     "; call again: the replica that took over serves it"));
  }
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace sdg
