// Turns SIGINT and SIGTERM into calls on an owned thread, so that signal
// handling can take locks and call into gRPC (a signal handler cannot).
#ifndef SDG_BASE_SIGNAL_WATCHER_H_
#define SDG_BASE_SIGNAL_WATCHER_H_

#include <pthread.h>

#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace sdg {

class SignalWatcher {
 public:
  // `on_signal(count)` runs on the watcher's thread for each SIGINT or SIGTERM;
  // count is 1 for the first. Construct it before any other thread starts:
  // it blocks both signals in the calling thread, which new threads inherit.
  explicit SignalWatcher(absl::AnyInvocable<void(int count)> on_signal);
  ~SignalWatcher();

  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  void Run();

  absl::AnyInvocable<void(int)> on_signal_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_BASE_SIGNAL_WATCHER_H_
