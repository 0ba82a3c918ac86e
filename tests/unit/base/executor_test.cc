#include "base/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace sdg {
namespace {

TEST(ExecutorTest, RunsWorkOnItsOwnThreadsNotThePostersThread) {
  absl::Notification ran;
  std::thread::id ran_on;
  Executor executor(1, "test-executor");
  executor.Post([&] {
    ran_on = std::this_thread::get_id();
    ran.Notify();
  });
  ran.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(ExecutorTest, DestructionRunsWhatWasPostedThenJoins) {
  std::atomic<int> runs = 0;
  {
    Executor executor(2, "test-executor");
    for (int i = 0; i < 100; ++i) executor.Post([&] { ++runs; });
  }
  EXPECT_EQ(runs.load(), 100);
}

TEST(ExecutorTest, WorkThatBlocksHoldsUpOnlyItsOwnThread) {
  bool first_was_unblocked = false;
  {
    Executor executor(2, "test-executor");
    absl::Notification unblock;
    executor.Post([&] {
      // Only the second task, on the other thread, can unblock it; the bound
      // makes a regression fail instead of hang.
      first_was_unblocked =
          unblock.WaitForNotificationWithTimeout(absl::Minutes(1));
    });
    executor.Post([&] { unblock.Notify(); });
  }
  EXPECT_TRUE(first_was_unblocked);
}

}  // namespace
}  // namespace sdg
