// Runs a task every `period` on a thread of its own, for work that may block
// (store writes, disk scans) and so must not run on a TimerService's thread
// or a gRPC reaction. The first run is one period after construction. The
// destructor wakes the thread, waits for a run in progress to return, and
// joins it.
#ifndef SDG_BASE_PERIODIC_TASK_H_
#define SDG_BASE_PERIODIC_TASK_H_

#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sdg {

class PeriodicTask {
 public:
  PeriodicTask(absl::Duration period, absl::AnyInvocable<void()> task);
  ~PeriodicTask();

  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

 private:
  void Loop();

  const absl::Duration period_;
  absl::AnyInvocable<void()> task_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace sdg

#endif  // SDG_BASE_PERIODIC_TASK_H_
