// The event loop's timers: due order, cancellation (which waits for a
// running callback, except from the callback itself), and what is dropped
// when the loop goes.
#include "server/http/event_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace sdg {
namespace {

class EventLoopTimersTest : public ::testing::Test {
 protected:
  std::unique_ptr<EventLoop> loop_ = *EventLoop::Create();
};

TEST_F(EventLoopTimersTest, TimersRunOnTheLoopThreadInDueOrder) {
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  auto record = [&](int value) {
    return [&, value] {
      absl::MutexLock lock(&mu);
      order.push_back(value);
      if (order.size() == 3) done.Notify();
    };
  };
  // Armed out of order; zero, then 20 ms, then 40 ms.
  loop_->RunAfter(absl::Milliseconds(40), record(3));
  loop_->RunAfter(absl::ZeroDuration(), record(1));
  loop_->RunAfter(absl::Milliseconds(20), record(2));
  done.WaitForNotification();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST_F(EventLoopTimersTest, ACancelledTimerNeverRuns) {
  std::atomic<bool> cancelled_ran = false;
  absl::Notification later_ran;
  TimerService::TimerId id =
      loop_->RunAfter(absl::Milliseconds(10), [&] { cancelled_ran = true; });
  loop_->CancelTimer(id);
  // A later timer running proves the loop went past the cancelled one's due
  // time.
  loop_->RunAfter(absl::Milliseconds(50), [&] { later_ran.Notify(); });
  later_ran.WaitForNotification();
  EXPECT_FALSE(cancelled_ran);
}

TEST_F(EventLoopTimersTest, CancelWaitsForARunningCallback) {
  absl::Notification started;
  absl::Notification returned;
  bool canceller_waited = false;  // read after `returned`
  TimerService::TimerId id = loop_->RunAfter(absl::ZeroDuration(), [&] {
    started.Notify();
    // Returns only once CancelTimer below is blocked waiting for this
    // callback; without that wait it never is, and this reports false.
    canceller_waited =
        loop_->AwaitCancelTimerWaitingForTesting(absl::Seconds(60));
    returned.Notify();
  });
  started.WaitForNotification();
  loop_->CancelTimer(id);  // returns only after the callback has finished
  returned.WaitForNotification();
  EXPECT_TRUE(canceller_waited);
}

TEST_F(EventLoopTimersTest, ATimerMayCancelItselfFromItsCallback) {
  absl::Notification done;
  auto id = std::make_shared<std::atomic<TimerService::TimerId>>(0);
  absl::Notification armed;
  *id = loop_->RunAfter(absl::Milliseconds(5), [&, id] {
    armed.WaitForNotification();
    loop_->CancelTimer(*id);  // on the loop thread: must not wait for itself
    done.Notify();
  });
  armed.Notify();
  done.WaitForNotification();
}

TEST_F(EventLoopTimersTest, DestroyingTheLoopDropsTimersThatHaveNotRun) {
  std::atomic<bool> ran = false;
  loop_->RunAfter(absl::Hours(1), [&] { ran = true; });
  loop_.reset();
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace sdg
