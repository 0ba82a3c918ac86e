#include "base/signal_watcher.h"

#include <signal.h>

namespace sdg {
namespace {

sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher(absl::AnyInvocable<void(int)> on_signal)
    : on_signal_(std::move(on_signal)) {
  sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { Run(); });
}

SignalWatcher::~SignalWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Wakes sigwait(); the thread sees stopping_ and returns. The signal is
  // blocked in every thread and taken by sigwait, so it kills nothing.
  // NOLINTNEXTLINE(bugprone-bad-signal-to-kill-thread)
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

void SignalWatcher::Run() {
  sigset_t set = WatchedSignals();
  int count = 0;
  while (true) {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) != 0) continue;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    on_signal_(++count);
  }
}

}  // namespace sdg
