// A one-shot cancellation signal owned by a job: cancelling it stops the job's
// work (new shards, in-flight HTTP requests) and never touches the threads.
#ifndef SDG_BASE_CANCELLATION_TOKEN_H_
#define SDG_BASE_CANCELLATION_TOKEN_H_

#include <cstdint>
#include <map>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sdg {

class CancellationToken {
 public:
  // Unregisters its callback when destroyed. If the callback is running on
  // another thread at that moment, the destructor waits for it to return, so a
  // callback never outlives what it captured (as std::stop_callback; on the
  // thread running the callbacks it does not wait).
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& other) noexcept;
    Registration& operator=(Registration&& other) noexcept;
    ~Registration();

   private:
    friend class CancellationToken;
    Registration(CancellationToken* token, uint64_t id)
        : token_(token), id_(id) {}
    void Reset();

    CancellationToken* token_ = nullptr;
    uint64_t id_ = 0;
  };

  CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Fires the token. The first reason wins; later calls do nothing. Returns
  // true for the call that fired it. Callbacks run on this thread.
  bool Cancel(absl::Status reason);

  bool IsCancelled() const;
  // OK while not cancelled.
  absl::Status reason() const;

  // Runs `callback` once when the token fires, or at once (on this thread) if
  // it has already fired. Keep the registration for as long as the callback's
  // captures live.
  [[nodiscard]] Registration OnCancel(absl::AnyInvocable<void()> callback);

  // Blocks until a Registration's destructor is waiting for a running
  // callback, or `bound` passes; true in the first case. Lets a test prove
  // the wait happens without guessing at thread timing.
  bool AwaitUnregisterWaitingForTesting(absl::Duration bound) const;

 private:
  void Unregister(uint64_t id);

  mutable absl::Mutex mu_;
  absl::Status reason_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool callbacks_done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id cancelling_thread_ ABSL_GUARDED_BY(mu_);
  // Registration destructors waiting for the callbacks to finish.
  int unregisters_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, absl::AnyInvocable<void()>> callbacks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_BASE_CANCELLATION_TOKEN_H_
