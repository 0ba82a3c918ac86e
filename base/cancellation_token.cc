#include "base/cancellation_token.h"

#include <utility>

namespace sdg {

CancellationToken::Registration::Registration(Registration&& other) noexcept
    : token_(std::exchange(other.token_, nullptr)), id_(other.id_) {}

CancellationToken::Registration& CancellationToken::Registration::operator=(
    Registration&& other) noexcept {
  if (this != &other) {
    Reset();
    token_ = std::exchange(other.token_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

CancellationToken::Registration::~Registration() { Reset(); }

void CancellationToken::Registration::Reset() {
  if (token_ != nullptr) token_->Unregister(id_);
  token_ = nullptr;
}

bool CancellationToken::Cancel(absl::Status reason) {
  std::map<uint64_t, absl::AnyInvocable<void()>> to_run;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    cancelled_ = true;
    reason_ =
        reason.ok() ? absl::CancelledError("cancelled") : std::move(reason);
    cancelling_thread_ = std::this_thread::get_id();
    to_run.swap(callbacks_);
  }
  for (auto& [id, callback] : to_run) callback();
  absl::MutexLock lock(&mu_);
  callbacks_done_ = true;
  return true;
}

bool CancellationToken::IsCancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

absl::Status CancellationToken::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

CancellationToken::Registration CancellationToken::OnCancel(
    absl::AnyInvocable<void()> callback) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      uint64_t id = next_id_++;
      callbacks_.emplace(id, std::move(callback));
      return Registration(this, id);
    }
  }
  callback();
  return Registration();
}

void CancellationToken::Unregister(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (callbacks_.erase(id) > 0) return;
  if (cancelling_thread_ == std::this_thread::get_id()) return;
  if (callbacks_done_) return;
  // Cancel() took the callback and may be running it right now.
  ++unregisters_waiting_;
  mu_.Await(absl::Condition(&callbacks_done_));
  --unregisters_waiting_;
}

bool CancellationToken::AwaitUnregisterWaitingForTesting(
    absl::Duration bound) const {
  absl::MutexLock lock(&mu_);
  auto waiting = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return unregisters_waiting_ > 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&waiting), bound);
}

}  // namespace sdg
