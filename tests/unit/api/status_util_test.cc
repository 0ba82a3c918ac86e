#include "server/api/status_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/store/event_log.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

TEST(ToGrpcStatusTest, KeepsTheCodeAndTheMessage) {
  grpc::Status status =
      ToGrpcStatus(absl::InvalidArgumentError("template: unknown column x"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "template: unknown column x");
}

// A replica fenced out of the store ends its calls so that a client calls
// again (gRPC clients retry UNAVAILABLE) and reaches the replica that took
// over, rather than giving up on a FAILED_PRECONDITION.
TEST(ToGrpcStatusTest, AFencedOutReplicaIsUnavailableToItsClients) {
  grpc::Status status = ToGrpcStatus(
      FencedOutError("this replica no longer holds the replica lease"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(),
              HasSubstr("this replica no longer holds the replica lease"));
  EXPECT_THAT(status.error_message(), HasSubstr("call again"));
  // The same code without the mark is the caller's precondition.
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace sdg
