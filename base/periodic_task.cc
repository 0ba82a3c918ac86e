#include "base/periodic_task.h"

#include <utility>

namespace sdg {

PeriodicTask::PeriodicTask(absl::Duration period,
                           absl::AnyInvocable<void()> task)
    : period_(period), task_(std::move(task)), thread_([this] { Loop(); }) {}

PeriodicTask::~PeriodicTask() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void PeriodicTask::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const bool stopping =
          mu_.AwaitWithTimeout(absl::Condition(&stopping_), period_);
      if (stopping) return;
    }
    task_();
  }
}

}  // namespace sdg
