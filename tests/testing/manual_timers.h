// A TimerService that never fires on its own: a test arms timers through the
// code under test and fires them when it chooses, so nothing waits on a clock.
#ifndef SDG_TESTS_TESTING_MANUAL_TIMERS_H_
#define SDG_TESTS_TESTING_MANUAL_TIMERS_H_

#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/timer_service.h"

namespace sdg::testing {

class ManualTimers final : public TimerService {
 public:
  TimerId RunAfter(absl::Duration delay,
                   absl::AnyInvocable<void()> callback) override {
    absl::MutexLock lock(&mu_);
    TimerId id = next_id_++;
    armed_.emplace(id, Armed{delay, std::move(callback)});
    return id;
  }
  void CancelTimer(TimerId id) override {
    absl::MutexLock lock(&mu_);
    armed_.erase(id);
  }

  // The delays of the timers armed and not yet fired or cancelled.
  std::vector<absl::Duration> ArmedDelays() {
    absl::MutexLock lock(&mu_);
    std::vector<absl::Duration> delays;
    for (const auto& [id, armed] : armed_) delays.push_back(armed.delay);
    return delays;
  }
  // Runs every armed timer's callback on this thread, oldest first.
  void FireAll() {
    std::map<TimerId, Armed> due;
    {
      absl::MutexLock lock(&mu_);
      due.swap(armed_);
    }
    for (auto& [id, armed] : due) armed.callback();
  }

 private:
  struct Armed {
    absl::Duration delay;
    absl::AnyInvocable<void()> callback;
  };
  absl::Mutex mu_;
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<TimerId, Armed> armed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_MANUAL_TIMERS_H_
