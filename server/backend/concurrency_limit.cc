#include "server/backend/concurrency_limit.h"

#include <algorithm>

namespace sdg {

ConcurrencyLimit ConcurrencyLimit::Fixed(int limit) {
  return ConcurrencyLimit(false, std::max(1, limit), Adaptive{});
}

ConcurrencyLimit ConcurrencyLimit::MakeAdaptive(const Adaptive& options) {
  return ConcurrencyLimit(
      true, std::clamp(options.initial, options.min, options.max), options);
}

void ConcurrencyLimit::OnSuccess(absl::Duration latency, absl::Time now) {
  if (!adaptive_) return;
  // An exponentially weighted average over roughly the last 20 replies;
  // its lowest value is the baseline. Comparing averages, not single
  // replies, keeps short and long generations from looking like load.
  ++replies_;
  smoothed_latency_ =
      replies_ == 1 ? latency : smoothed_latency_ * 0.95 + latency * 0.05;
  if (replies_ >= kWarmupReplies) {
    min_latency_ = std::min(min_latency_, smoothed_latency_);
  }
  if (smoothed_latency_ > min_latency_ * options_.tolerance) {
    Decrease(options_.latency_backoff, now);
    return;
  }
  // Per reply: +1 in slow start (doubling per round trip), else +1/limit
  // (one per round trip).
  limit_ += slow_start_ ? 1.0 : 1.0 / limit_;
  limit_ = std::min(limit_, static_cast<double>(options_.max));
}

void ConcurrencyLimit::OnOverload(absl::Time now) {
  if (!adaptive_) return;
  Decrease(options_.overload_backoff, now);
}

void ConcurrencyLimit::Decrease(double factor, absl::Time now) {
  slow_start_ = false;
  // Replies already in flight when we backed off say nothing new.
  absl::Duration round_trip =
      std::max(smoothed_latency_, absl::Milliseconds(1));
  if (now - last_decrease_ < round_trip) return;
  last_decrease_ = now;
  limit_ = std::max(static_cast<double>(options_.min), limit_ * factor);
}

}  // namespace sdg
