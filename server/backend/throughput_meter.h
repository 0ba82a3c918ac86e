// A backend's measured pace, for EstimateJob's time range: over its last
// replies, how many there were, the completion tokens they reported and the
// time at least one of them was in flight (the union of their intervals,
// so idle time between jobs does not count and concurrency does). Pure: no
// lock, times passed in.
#ifndef SDG_SERVER_BACKEND_THROUGHPUT_METER_H_
#define SDG_SERVER_BACKEND_THROUGHPUT_METER_H_

#include <cstdint>
#include <deque>

#include "absl/time/time.h"

namespace sdg {

class ThroughputMeter {
 public:
  struct Pace {
    int64_t requests = 0;
    int64_t completion_tokens = 0;
    absl::Duration busy;  // time with at least one of them in flight
  };

  // Keeps the last `capacity` replies.
  explicit ThroughputMeter(size_t capacity = 1024) : capacity_(capacity) {}

  // A successful request, in flight from `start` to `end`.
  void Add(absl::Time start, absl::Time end, int64_t completion_tokens);
  Pace Measure() const;

 private:
  struct Reply {
    absl::Time start;
    absl::Time end;
    int64_t completion_tokens;
  };
  size_t capacity_;
  std::deque<Reply> replies_;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_THROUGHPUT_METER_H_
