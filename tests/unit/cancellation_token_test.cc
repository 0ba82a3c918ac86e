#include "server/cancellation_token.h"

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
  absl::Notification release_callback;
  bool callback_finished = false;
  auto registration =
      std::make_unique<CancellationToken::Registration>(token.OnCancel([&] {
        callback_started.Notify();
        release_callback.WaitForNotification();
        callback_finished = true;
      }));
  std::thread canceller([&] { token.Cancel(absl::CancelledError("x")); });
  callback_started.WaitForNotification();
  std::thread releaser([&] { release_callback.Notify(); });
  registration.reset();  // returns only after the callback has finished
  EXPECT_TRUE(callback_finished);
  canceller.join();
  releaser.join();
}

}  // namespace
}  // namespace sdg
