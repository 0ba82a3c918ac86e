// One thread that waits on epoll and runs, in turn, the timers that are due
// (the TimerService: retry backoff, an ejected endpoint's return, job
// timeouts) and its driver: the HTTP client, whose sockets it watches and
// whose work from other threads it wakes for. RunAfter and CancelTimer may
// be called from any thread.
#ifndef SDG_SERVER_HTTP_EVENT_LOOP_H_
#define SDG_SERVER_HTTP_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/timer_service.h"

namespace sdg {

class EventLoop final : public TimerService {
 public:
  // What the loop runs besides its timers, every round, on its thread.
  class Driver {
   public:
    virtual ~Driver() = default;
    // Takes what other threads handed over (they call Wake()).
    virtual void TakeSubmittedWork() = 0;
    // The driver's own next deadline (InfiniteFuture: none): the loop
    // waits no longer than that.
    virtual absl::Time NextDeadline() const = 0;
    // A file descriptor the driver watches (Watch) is ready; `events` are
    // epoll's.
    virtual void OnReady(int fd, uint32_t events) = 0;
    // After each wait, whatever ended it.
    virtual void AfterWait() = 0;
    // The driver is leaving (Detach): nothing may be left waiting on it.
    virtual void Detached() = 0;
  };

  // Starts the thread ("sdg-loop").
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create();
  // Drops the timers that have not run and stops the thread. The driver
  // must have detached.
  ~EventLoop() override;

  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // At most one driver at a time.
  void Attach(Driver& driver);
  // Returns once the loop has run driver.Detached() and will not call the
  // driver again. Not from the loop's thread.
  void Detach();
  // Ends the current wait: the driver has work to take.
  void Wake();
  // For the driver, on the loop's thread: waits for `events` (EPOLLIN,
  // EPOLLOUT) on `fd` from the next round on, or no longer.
  void Watch(int fd, uint32_t events);
  void Unwatch(int fd);

  TimerId RunAfter(absl::Duration delay,
                   absl::AnyInvocable<void()> callback) override;
  void CancelTimer(TimerId id) override;
  // Blocks until a CancelTimer call is waiting for a running callback, or
  // `bound` passes; true in the first case. For tests of that wait.
  bool AwaitCancelTimerWaitingForTesting(absl::Duration bound);

 private:
  struct Timer {
    absl::Time due;
    absl::AnyInvocable<void()> callback;
  };
  // A min-heap entry; a cancelled timer's entry stays until it surfaces.
  struct TimerDue {
    absl::Time due;
    TimerId id;
    bool operator>(const TimerDue& other) const { return due > other.due; }
  };

  EventLoop(int epoll_fd, int wake_fd);
  // The thread: rounds until the loop stops.
  void Loop();
  // The driver to run this round (null: none), after settling a Detach.
  Driver* TakeDriver();
  // Runs the timers that are due; returns when the next one is (infinite
  // future if none).
  absl::Time RunDueTimers();
  // Waits on epoll until a watched fd is ready, Wake, or `deadline`.
  void Wait(Driver* driver, absl::Time deadline);

  const int epoll_fd_;
  const int wake_fd_;  // an eventfd

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Driver* driver_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
  TimerId next_timer_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<TimerId, Timer> timers_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<TimerDue, std::vector<TimerDue>, std::greater<>>
      timer_queue_ ABSL_GUARDED_BY(mu_);
  // The timer whose callback runs now (0: none), for CancelTimer to wait on.
  TimerId running_timer_ ABSL_GUARDED_BY(mu_) = 0;
  int cancels_waiting_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_HTTP_EVENT_LOOP_H_
