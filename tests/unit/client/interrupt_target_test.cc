#include "client/interrupt_target.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace sdg {
namespace {

// The cancel action runs on the signal thread and uses the main thread's
// stub: once Set(nullptr) returns, the main thread destroys it. So Set must
// wait for a running action. The action here returns only once it sees Set
// blocked (or after 60 s, reporting that it never did), so the test does
// not pass by luck: with Set not waiting it fails.
TEST(InterruptTargetTest, SetWaitsForARunningAction) {
  InterruptTarget target;
  absl::Notification action_started;
  bool saw_set_waiting = false;
  std::atomic<bool> action_returned = false;
  target.Set([&] {
    action_started.Notify();
    saw_set_waiting = target.AwaitSetWaitingForTesting(absl::Seconds(60));
    action_returned = true;
  });
  std::thread signal_thread([&] { target.Interrupt(); });
  action_started.WaitForNotification();
  target.Set(nullptr);
  EXPECT_TRUE(action_returned) << "Set returned while the action ran";
  signal_thread.join();
  EXPECT_TRUE(saw_set_waiting);
}

TEST(InterruptTargetTest, SetWithNoActionRunningReturnsAtOnce) {
  InterruptTarget target;
  target.Set([] {});
  target.Set(nullptr);  // would hang if it waited for an action never run
  EXPECT_FALSE(target.AwaitSetWaitingForTesting(absl::ZeroDuration()));
}

}  // namespace
}  // namespace sdg
