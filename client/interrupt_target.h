// What Ctrl-C does in sdgctl: the first interrupt runs the action set
// (cancel the job, or leave it running), a second one (or one with no action
// set) exits at once. The action runs on the signal watcher's thread and may
// use what the main thread owns (the stub, the channel): Set() waits for a
// running action to return, so that after Set(nullptr) the main thread may
// destroy them.
#ifndef SDG_CLIENT_INTERRUPT_TARGET_H_
#define SDG_CLIENT_INTERRUPT_TARGET_H_

#include <functional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sdg {

class InterruptTarget {
 public:
  // Replaces the action; first waits for one that is running to return.
  void Set(std::function<void()> action);
  // From the signal watcher's thread.
  void Interrupt();

  // For tests: true once a Set() is waiting for a running action, or false
  // after `timeout`.
  bool AwaitSetWaitingForTesting(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  std::function<void()> action_ ABSL_GUARDED_BY(mu_);
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  int setters_waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sdg

#endif  // SDG_CLIENT_INTERRUPT_TARGET_H_
