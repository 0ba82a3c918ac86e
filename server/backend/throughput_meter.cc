#include "server/backend/throughput_meter.h"

#include <algorithm>
#include <vector>

namespace sdg {

void ThroughputMeter::Add(absl::Time start, absl::Time end,
                          int64_t completion_tokens) {
  replies_.push_back({start, end, completion_tokens});
  if (replies_.size() > capacity_) replies_.pop_front();
}

ThroughputMeter::Pace ThroughputMeter::Measure() const {
  Pace pace;
  std::vector<Reply> sorted(replies_.begin(), replies_.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const Reply& a, const Reply& b) { return a.start < b.start; });
  absl::Time covered_until = absl::InfinitePast();
  for (const Reply& reply : sorted) {
    ++pace.requests;
    pace.completion_tokens += reply.completion_tokens;
    // The part of this reply's interval no earlier one covered.
    const absl::Time from = std::max(reply.start, covered_until);
    if (reply.end > from) pace.busy += reply.end - from;
    covered_until = std::max(covered_until, reply.end);
  }
  return pace;
}

}  // namespace sdg
