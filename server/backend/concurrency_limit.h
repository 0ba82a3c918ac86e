// How many requests one backend endpoint may have in flight: a fixed number,
// or an AIMD limit that finds the server's capacity from its replies.
//
// The adaptive limit starts small and doubles every round trip (slow start)
// until the first sign of overload, then grows by one per round trip
// (additive increase). It backs off (multiplicative decrease) on 429, 503
// and timeouts, and when the smoothed latency climbs above `tolerance` times
// its lowest value, which is what a server queueing requests looks
// like. At most one decrease per round trip, so one burst of errors counts
// once.
#ifndef SDG_SERVER_BACKEND_CONCURRENCY_LIMIT_H_
#define SDG_SERVER_BACKEND_CONCURRENCY_LIMIT_H_

#include <cstdint>

#include "absl/time/time.h"

namespace sdg {

class ConcurrencyLimit {
 public:
  struct Adaptive {
    int initial = 16;
    int min = 1;
    int max = 1024;
    // Back off when smoothed latency > tolerance × the lowest seen.
    double tolerance = 2.0;
    double latency_backoff = 0.9;   // factor on rising latency
    double overload_backoff = 0.5;  // factor on 429, 503, timeouts
  };

  static ConcurrencyLimit Fixed(int limit);
  static ConcurrencyLimit MakeAdaptive(const Adaptive& options);

  int limit() const { return static_cast<int>(limit_); }
  bool adaptive() const { return adaptive_; }

  // A reply that was not an overload signal, after `latency`.
  void OnSuccess(absl::Duration latency, absl::Time now);
  // 429, 503 or a timeout.
  void OnOverload(absl::Time now);

 private:
  ConcurrencyLimit(bool adaptive, double limit, const Adaptive& options)
      : adaptive_(adaptive), limit_(limit), options_(options) {}
  void Decrease(double factor, absl::Time now);

  static constexpr int kWarmupReplies = 10;

  bool adaptive_;
  double limit_;
  Adaptive options_;
  bool slow_start_ = true;
  absl::Duration min_latency_ = absl::InfiniteDuration();
  absl::Duration smoothed_latency_ = absl::ZeroDuration();
  int64_t replies_ = 0;
  absl::Time last_decrease_ = absl::InfinitePast();
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_CONCURRENCY_LIMIT_H_
