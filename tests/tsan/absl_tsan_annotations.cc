// ThreadSanitizer support for Debian's Abseil, linked into TSan builds only.
//
// Debian builds libabsl_synchronization without -fsanitize=thread, so TSan
// cannot see that absl::Mutex, absl::CondVar and absl::Notification order
// memory: every access guarded by them would be reported as a race (checked:
// two threads incrementing a counter under absl::MutexLock are reported).
// Suppressing those reports would hide real races, so instead this file
// interposes the library's out-of-line entry points and tells TSan what an
// instrumented Abseil would: a lock acquires the mutex, an unlock (or a wait,
// which unlocks) releases it. Each wrapper then calls the library's own
// function, found with dlsym(RTLD_NEXT).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

template <typename Function>
Function Original(const char* mangled_name) {
  void* function = dlsym(RTLD_NEXT, mangled_name);
  if (function == nullptr) {
    std::fprintf(stderr,
                 "absl_tsan_annotations: %s not found in libabsl; update the "
                 "mangled names for this Abseil version\n",
                 mangled_name);
    std::abort();
  }
  return reinterpret_cast<Function>(function);
}

#define SDG_ORIGINAL(type, name) \
  static const auto original = Original<type>(name)

void Acquire(const void* address) {
  __tsan_acquire(const_cast<void*>(address));
}
void Release(const void* address) {
  __tsan_release(const_cast<void*>(address));
}

// Abseil evaluates a waiter's condition inside the library, on the waiting
// thread or on the thread that unlocks; either way the evaluator holds the
// mutex, so the evaluation is annotated as a critical section of its own.
// The waiter builds this on its stack and the unlocking thread may read it:
// Wrap publishes it (a release on its address) and Eval acquires that
// before reading a field. The wrapping Condition uses the void* form, whose
// fields only the library reads: with the template form, its header-defined
// caller read them in instrumented code before Eval could order anything,
// which TSan reported one run in many (ExecutorTest, a Notification waited
// on with a timeout while another thread notified).
struct AnnotatedCondition {
  const absl::Condition* condition;
  const absl::Mutex* mu;

  static bool Eval(void* arg) {
    Acquire(arg);
    auto* self = static_cast<AnnotatedCondition*>(arg);
    Acquire(self->mu);
    bool result = self->condition->Eval();
    Release(self->mu);
    return result;
  }
  absl::Condition Wrap() {
    Release(this);
    return absl::Condition(&AnnotatedCondition::Eval, this);
  }
};

// Abseil's deadlock detector keeps its lock graph under an internal lock
// that TSan cannot see either, so its bookkeeping would be reported as
// racing. TSan detects lock-order inversions itself.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  SDG_ORIGINAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  original(this);
  Acquire(this);
}

void Mutex::ReaderLock() {
  SDG_ORIGINAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  original(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  SDG_ORIGINAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  bool locked = original(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  SDG_ORIGINAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Release(this);
  original(this);
}

void Mutex::ReaderUnlock() {
  SDG_ORIGINAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(this);
  original(this);
}

void Mutex::LockWhen(const Condition& condition) {
  SDG_ORIGINAL(void (*)(Mutex*, const Condition&),
               "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  AnnotatedCondition annotated{&condition, this};
  original(this, annotated.Wrap());
  Acquire(this);
}

bool Mutex::LockWhenWithDeadline(const Condition& condition, Time deadline) {
  SDG_ORIGINAL(bool (*)(Mutex*, const Condition&, Time),
               "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_"
               "9ConditionENS0_4TimeE");
  AnnotatedCondition annotated{&condition, this};
  bool result = original(this, annotated.Wrap(), deadline);
  Acquire(this);  // held on return either way
  return result;
}

bool Mutex::LockWhenWithTimeout(const Condition& condition, Duration timeout) {
  SDG_ORIGINAL(bool (*)(Mutex*, const Condition&, Duration),
               "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_"
               "9ConditionENS0_8DurationE");
  AnnotatedCondition annotated{&condition, this};
  bool result = original(this, annotated.Wrap(), timeout);
  Acquire(this);
  return result;
}

void Mutex::Await(const Condition& condition) {
  SDG_ORIGINAL(void (*)(Mutex*, const Condition&),
               "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  AnnotatedCondition annotated{&condition, this};
  original(this, annotated.Wrap());
  Acquire(this);
}

bool Mutex::AwaitWithDeadline(const Condition& condition, Time deadline) {
  SDG_ORIGINAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  AnnotatedCondition annotated{&condition, this};
  bool result = original(this, annotated.Wrap(), deadline);
  Acquire(this);
  return result;
}

bool Mutex::AwaitWithTimeout(const Condition& condition, Duration timeout) {
  SDG_ORIGINAL(bool (*)(Mutex*, const Condition&, Duration),
               "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_"
               "8DurationE");
  Release(this);
  AnnotatedCondition annotated{&condition, this};
  bool result = original(this, annotated.Wrap(), timeout);
  Acquire(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  SDG_ORIGINAL(void (*)(CondVar*, Mutex*),
               "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  original(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  SDG_ORIGINAL(
      bool (*)(CondVar*, Mutex*, Time),
      "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  bool result = original(this, mu, deadline);
  Acquire(mu);
  return result;
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  SDG_ORIGINAL(
      bool (*)(CondVar*, Mutex*, Duration),
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  bool result = original(this, mu, timeout);
  Acquire(mu);
  return result;
}

void Notification::Notify() {
  SDG_ORIGINAL(void (*)(Notification*),
               "_ZN4absl7debian312Notification6NotifyEv");
  Release(this);
  original(this);
}

void Notification::WaitForNotification() const {
  SDG_ORIGINAL(void (*)(const Notification*),
               "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  original(this);
  Acquire(this);
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  SDG_ORIGINAL(bool (*)(const Notification*, Duration),
               "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeout"
               "ENS0_8DurationE");
  bool notified = original(this, timeout);
  if (notified) Acquire(this);
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  SDG_ORIGINAL(bool (*)(const Notification*, Time),
               "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlin"
               "eENS0_4TimeE");
  bool notified = original(this, deadline);
  if (notified) Acquire(this);
  return notified;
}

// absl::Status copies share a reference-counted payload: Ref() is inline
// (instrumented) but the decrement that may delete it is in the library.
// Annotated as reference counts are: each drop releases, and whoever may
// delete first acquires every earlier drop.
void Status::UnrefNonInlined(uintptr_t rep) {
  SDG_ORIGINAL(void (*)(uintptr_t),
               "_ZN4absl7debian36Status15UnrefNonInlinedEm");
  Release(reinterpret_cast<void*>(rep));
  Acquire(reinterpret_cast<void*>(rep));
  original(rep);
}

ABSL_NAMESPACE_END
}  // namespace absl
