#include "server/backend/throughput_meter.h"

#include <gtest/gtest.h>

namespace sdg {
namespace {

absl::Time At(int seconds) { return absl::FromUnixSeconds(seconds); }

// Overlapping replies count their shared time once, and a gap between them
// (no request in flight) not at all.
TEST(ThroughputMeterTest, BusyTimeIsTheUnionOfTheRepliesIntervals) {
  ThroughputMeter meter;
  meter.Add(At(0), At(4), 10);
  meter.Add(At(2), At(6), 20);
  meter.Add(At(3), At(5), 5);    // inside the two above
  meter.Add(At(20), At(21), 1);  // after 14 idle seconds
  ThroughputMeter::Pace pace = meter.Measure();
  EXPECT_EQ(pace.requests, 4);
  EXPECT_EQ(pace.completion_tokens, 36);
  EXPECT_EQ(pace.busy, absl::Seconds(7));
}

TEST(ThroughputMeterTest, KeepsOnlyTheLastReplies) {
  ThroughputMeter meter(/*capacity=*/2);
  meter.Add(At(0), At(100), 1000);
  meter.Add(At(200), At(201), 1);
  meter.Add(At(202), At(203), 2);
  ThroughputMeter::Pace pace = meter.Measure();
  EXPECT_EQ(pace.requests, 2);
  EXPECT_EQ(pace.completion_tokens, 3);
  EXPECT_EQ(pace.busy, absl::Seconds(2));
}

}  // namespace
}  // namespace sdg
