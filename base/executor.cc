#include "base/executor.h"

#include <pthread.h>

#include <utility>

namespace sdg {

Executor::Executor(int threads, const std::string& name) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Loop(); });
    pthread_setname_np(threads_.back().native_handle(),
                       name.substr(0, 15).c_str());
  }
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void Executor::Post(absl::AnyInvocable<void() &&> work) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  queue_.push_back(std::move(work));
}

void Executor::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> work;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(work)();
  }
}

}  // namespace sdg
