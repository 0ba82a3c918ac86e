#include "client/interrupt_target.h"

#include <cstdlib>

namespace sdg {

void InterruptTarget::Set(std::function<void()> action) {
  absl::MutexLock lock(&mu_);
  ++setters_waiting_;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_; };
  mu_.Await(absl::Condition(&idle));
  --setters_waiting_;
  action_ = std::move(action);
}

void InterruptTarget::Interrupt() {
  std::function<void()> action;
  {
    absl::MutexLock lock(&mu_);
    if (!action_ || interrupted_) std::_Exit(130);
    interrupted_ = true;
    running_ = true;
    action = action_;
  }
  action();
  absl::MutexLock lock(&mu_);
  running_ = false;
}

bool InterruptTarget::AwaitSetWaitingForTesting(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto waiting = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return setters_waiting_ > 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&waiting), timeout);
}

}  // namespace sdg
