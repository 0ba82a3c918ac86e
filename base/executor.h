// A fixed set of threads that run posted work, oldest first: the owner of
// work that blocks (store writes and fsyncs, file imports, disk scans) and
// so must never run on a gRPC reaction thread. The destructor runs what was
// posted, then joins its threads.
#ifndef SDG_BASE_EXECUTOR_H_
#define SDG_BASE_EXECUTOR_H_

#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace sdg {

class Executor {
 public:
  // `threads` threads, named `name` (at most 15 characters show).
  Executor(int threads, const std::string& name);
  ~Executor();

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs `work` on one of the threads; never blocks. Work posted after the
  // destructor has started is not run.
  void Post(absl::AnyInvocable<void() &&> work);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: start once the rest exists
};

}  // namespace sdg

#endif  // SDG_BASE_EXECUTOR_H_
