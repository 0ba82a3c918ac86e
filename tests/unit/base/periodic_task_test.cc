#include "base/periodic_task.h"

#include <gtest/gtest.h>

#include "absl/synchronization/blocking_counter.h"

namespace sdg {
namespace {

TEST(PeriodicTaskTest, RunsAgainAndAgain) {
  absl::BlockingCounter three_runs(3);
  int runs = 0;  // the task's thread's until the destructor joins it
  {
    PeriodicTask task(absl::Milliseconds(1), [&] {
      if (++runs <= 3) three_runs.DecrementCount();
    });
    three_runs.Wait();
  }
  // The destructor joined the thread: no run is in progress or to come.
  const int after_destruction = runs;
  EXPECT_GE(after_destruction, 3);
  EXPECT_EQ(runs, after_destruction);
}

TEST(PeriodicTaskTest, DestructionDoesNotWaitForThePeriod) {
  // With a day's period, the destructor returns only because it wakes the
  // thread (ctest's timeout would end a test that waits a day).
  bool ran = false;
  {
    PeriodicTask task(absl::Hours(24), [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace sdg
