// Something that runs callbacks after a delay on a thread of its own: the
// HTTP event loop in sdgd (server/http), a hand-driven fake in tests. Layers
// that must not know the event loop (jobs, scheduling) take this interface.
#ifndef SDG_BASE_TIMER_SERVICE_H_
#define SDG_BASE_TIMER_SERVICE_H_

#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"

namespace sdg {

class TimerService {
 public:
  using TimerId = uint64_t;

  virtual ~TimerService() = default;

  // Runs `callback` once, `delay` from now, on the service's thread. It must
  // be quick and must not block: it holds up every other timer (and, in
  // sdgd, every HTTP transfer).
  virtual TimerId RunAfter(absl::Duration delay,
                           absl::AnyInvocable<void()> callback) = 0;

  // After this returns the callback will not start. If it is running on
  // another thread, waits for it to return, so a callback never outlives what
  // it captured (as CancellationToken::Registration; from inside the callback
  // itself it does not wait). Unknown or finished ids are ignored.
  virtual void CancelTimer(TimerId id) = 0;
};

}  // namespace sdg

#endif  // SDG_BASE_TIMER_SERVICE_H_
