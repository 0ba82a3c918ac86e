#include "server/backend/api_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

TEST(ApiKeyTest, TheKeyGoesOnlyIntoTheAuthorizationHeader) {
  EXPECT_THAT(ApiKey("sk-secret").AuthorizationHeaders(),
              ::testing::ElementsAre("Authorization: Bearer sk-secret"));
  EXPECT_TRUE(ApiKey().AuthorizationHeaders().empty());
}

TEST(ApiKeyTest, EveryEchoOfTheKeyIsRedacted) {
  ApiKey key("sk-secret");
  EXPECT_EQ(key.Redact("Incorrect API key: sk-secret (sk-secret)"),
            "Incorrect API key: [redacted API key] ([redacted API key])");
  absl::Status status =
      key.Redact(absl::UnauthenticatedError("bad key sk-secret"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(status.message(), "bad key [redacted API key]");
}

TEST(ApiKeyTest, TextWithoutTheKeyOrWithoutAKeyIsUnchanged) {
  EXPECT_EQ(ApiKey("sk-secret").Redact("HTTP 503"), "HTTP 503");
  EXPECT_EQ(ApiKey().Redact("anything"), "anything");
}

}  // namespace
}  // namespace sdg
