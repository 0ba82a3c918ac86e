#include "server/http/event_loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/time/clock.h"

namespace sdg {

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = wake_fd;
  if (epoll_fd < 0 || wake_fd < 0 ||
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &wake) != 0) {
    if (epoll_fd >= 0) close(epoll_fd);
    if (wake_fd >= 0) close(wake_fd);
    return absl::InternalError("cannot set up epoll for the event loop");
  }
  return std::unique_ptr<EventLoop>(new EventLoop(epoll_fd, wake_fd));
}

EventLoop::EventLoop(int epoll_fd, int wake_fd)
    : epoll_fd_(epoll_fd), wake_fd_(wake_fd) {
  thread_ = std::thread([this] { Loop(); });
  pthread_setname_np(thread_.native_handle(), "sdg-loop");
}

EventLoop::~EventLoop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  thread_.join();
  close(epoll_fd_);
  close(wake_fd_);
}

void EventLoop::Attach(Driver& driver) {
  {
    absl::MutexLock lock(&mu_);
    driver_ = &driver;
  }
  Wake();
}

void EventLoop::Detach() {
  absl::MutexLock lock(&mu_);
  if (driver_ == nullptr) return;
  detaching_ = true;
  Wake();
  auto detached = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return driver_ == nullptr;
  };
  mu_.Await(absl::Condition(&detached));
}

void EventLoop::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void EventLoop::Watch(int fd, uint32_t events) {
  epoll_event event{};
  event.data.fd = fd;
  event.events = events;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) != 0 && errno == ENOENT) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
  }
}

void EventLoop::Unwatch(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

TimerService::TimerId EventLoop::RunAfter(absl::Duration delay,
                                          absl::AnyInvocable<void()> callback) {
  TimerId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_timer_id_++;
    const absl::Time due = absl::Now() + delay;
    timers_.emplace(id, Timer{due, std::move(callback)});
    timer_queue_.push({due, id});
  }
  Wake();  // the loop may be sleeping past `due`
  return id;
}

void EventLoop::CancelTimer(TimerId id) {
  absl::MutexLock lock(&mu_);
  timers_.erase(id);
  if (std::this_thread::get_id() == thread_.get_id()) return;
  if (running_timer_ != id) return;
  auto not_running = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_timer_ != id;
  };
  ++cancels_waiting_;
  mu_.Await(absl::Condition(&not_running));
  --cancels_waiting_;
}

bool EventLoop::AwaitCancelTimerWaitingForTesting(absl::Duration bound) {
  absl::MutexLock lock(&mu_);
  auto waiting = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancels_waiting_ > 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&waiting), bound);
}

EventLoop::Driver* EventLoop::TakeDriver() {
  Driver* leaving = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!detaching_) return driver_;
    leaving = driver_;
  }
  // Outside mu_: what the driver completes may arm timers.
  leaving->Detached();
  absl::MutexLock lock(&mu_);
  driver_ = nullptr;
  detaching_ = false;
  return nullptr;
}

absl::Time EventLoop::RunDueTimers() {
  const absl::Time now = absl::Now();
  while (true) {
    absl::AnyInvocable<void()> callback;
    {
      absl::MutexLock lock(&mu_);
      running_timer_ = 0;
      while (!timer_queue_.empty() &&
             !timers_.contains(timer_queue_.top().id)) {
        timer_queue_.pop();  // cancelled
      }
      if (timer_queue_.empty()) return absl::InfiniteFuture();
      if (timer_queue_.top().due > now) return timer_queue_.top().due;
      const TimerId id = timer_queue_.top().id;
      timer_queue_.pop();
      auto it = timers_.find(id);
      callback = std::move(it->second.callback);
      timers_.erase(it);
      running_timer_ = id;
    }
    callback();
  }
}

void EventLoop::Wait(Driver* driver, absl::Time deadline) {
  constexpr int kIdleMs = 1000;
  int timeout_ms = kIdleMs;
  if (deadline != absl::InfiniteFuture()) {
    const absl::Duration until = deadline - absl::Now();
    timeout_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(until, absl::Milliseconds(1))), 0,
        kIdleMs));
  }
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  const int ready = epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
  for (int i = 0; i < ready; ++i) {
    if (events[i].data.fd == wake_fd_) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
      continue;
    }
    if (driver != nullptr) driver->OnReady(events[i].data.fd, events[i].events);
  }
}

void EventLoop::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    Driver* driver = TakeDriver();
    if (driver != nullptr) driver->TakeSubmittedWork();
    absl::Time deadline = RunDueTimers();
    if (driver != nullptr)
      deadline = std::min(deadline, driver->NextDeadline());
    Wait(driver, deadline);
    if (driver != nullptr) driver->AfterWait();
  }
  // Timers that have not run are dropped, outside mu_ (their captures may
  // take locks as they go).
  absl::flat_hash_map<TimerId, Timer> dropped;
  absl::MutexLock lock(&mu_);
  dropped.swap(timers_);
}

}  // namespace sdg
