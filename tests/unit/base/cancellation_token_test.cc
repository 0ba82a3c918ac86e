#include "base/cancellation_token.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "absl/synchronization/notification.h"

namespace sdg {
namespace {

TEST(CancellationTokenTest, CallbackRunsOnceWhenCancelled) {
  CancellationToken token;
  int calls = 0;
  auto registration = token.OnCancel([&] { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(token.Cancel(absl::CancelledError("stop")));
  EXPECT_FALSE(token.Cancel(absl::CancelledError("again")));
  EXPECT_EQ(calls, 1);
}

TEST(CancellationTokenTest, FirstReasonWins) {
  CancellationToken token;
  EXPECT_FALSE(token.IsCancelled());
  EXPECT_TRUE(token.reason().ok());
  token.Cancel(absl::AbortedError("fail fast"));
  token.Cancel(absl::CancelledError("later"));
  EXPECT_TRUE(token.IsCancelled());
  EXPECT_EQ(token.reason(), absl::AbortedError("fail fast"));
}

TEST(CancellationTokenTest, RegisteringAfterCancelRunsAtOnce) {
  CancellationToken token;
  token.Cancel(absl::CancelledError("x"));
  bool ran = false;
  auto registration = token.OnCancel([&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(CancellationTokenTest, DestroyedRegistrationDoesNotRun) {
  CancellationToken token;
  bool ran = false;
  {
    auto registration = token.OnCancel([&] { ran = true; });
  }
  token.Cancel(absl::CancelledError("x"));
  EXPECT_FALSE(ran);
}

TEST(CancellationTokenTest, RegistrationMayBeDestroyedInsideItsCallback) {
  CancellationToken token;
  std::optional<CancellationToken::Registration> registration;
  bool ran = false;
  registration.emplace(token.OnCancel([&] {
    ran = true;
    registration.reset();  // must not wait for itself
  }));
  token.Cancel(absl::CancelledError("x"));
  EXPECT_TRUE(ran);
  EXPECT_FALSE(registration.has_value());
}

TEST(CancellationTokenTest, DestroyingWaitsForARunningCallback) {
  CancellationToken token;
  absl::Notification callback_started;
  bool destroyer_waited = false;  // read after the canceller is joined
  std::optional<CancellationToken::Registration> registration =
      token.OnCancel([&] {
        callback_started.Notify();
        // Returns only once the destructor below is blocked waiting for this
        // callback; without that wait it never is, and this reports false.
        destroyer_waited =
            token.AwaitUnregisterWaitingForTesting(absl::Seconds(60));
      });
  std::thread canceller([&] { token.Cancel(absl::CancelledError("x")); });
  callback_started.WaitForNotification();
  registration.reset();  // returns only after the callback has finished
  canceller.join();
  EXPECT_TRUE(destroyer_waited);
}

}  // namespace
}  // namespace sdg
