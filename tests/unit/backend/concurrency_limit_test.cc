#include "server/backend/concurrency_limit.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace sdg {
namespace {

// A server that serves `capacity` requests at once in `service` each and
// queues the rest: with `in_flight` requests outstanding a reply takes
// service × max(1, in_flight / capacity). The limit drives in_flight.
struct QueueingServer {
  int capacity;
  absl::Duration service;

  absl::Duration Latency(int in_flight) const {
    return service * std::max(1.0, static_cast<double>(in_flight) / capacity);
  }
};

// Runs `rounds` round trips with the limit fully used; returns the limits
// seen in the last half.
std::pair<int, int> Drive(ConcurrencyLimit& limit, const QueueingServer& server,
                          int rounds) {
  absl::Time now = absl::UnixEpoch();
  int low = 1 << 30;
  int high = 0;
  for (int round = 0; round < rounds; ++round) {
    int in_flight = limit.limit();
    absl::Duration latency = server.Latency(in_flight);
    now += latency;
    for (int i = 0; i < in_flight; ++i) limit.OnSuccess(latency, now);
    if (round >= rounds / 2) {
      low = std::min(low, limit.limit());
      high = std::max(high, limit.limit());
    }
  }
  return {low, high};
}

TEST(ConcurrencyLimitTest, FixedNeverMoves) {
  ConcurrencyLimit limit = ConcurrencyLimit::Fixed(32);
  limit.OnOverload(absl::UnixEpoch());
  limit.OnSuccess(absl::Seconds(100), absl::UnixEpoch());
  EXPECT_EQ(limit.limit(), 32);
  EXPECT_FALSE(limit.adaptive());
}

TEST(ConcurrencyLimitTest, AdaptiveSettlesAtTheServersCapacity) {
  ConcurrencyLimit limit = ConcurrencyLimit::MakeAdaptive({});
  auto [low, high] =
      Drive(limit, QueueingServer{64, absl::Milliseconds(50)}, 400);
  // Enough to keep every slot busy, and no more than the latency tolerance
  // (2x) lets queue.
  EXPECT_GE(low, 64 * 0.9 * 0.9);
  EXPECT_LE(high, 2 * 64 + 1);
}

TEST(ConcurrencyLimitTest, AdaptiveGrowsToTheMaximumWhileLatencyHolds) {
  ConcurrencyLimit limit = ConcurrencyLimit::MakeAdaptive({});
  Drive(limit, QueueingServer{100000, absl::Milliseconds(50)}, 400);
  EXPECT_EQ(limit.limit(), 1024);
}

TEST(ConcurrencyLimitTest, OverloadHalvesOncePerRoundTrip) {
  ConcurrencyLimit::Adaptive options;
  options.initial = 100;
  ConcurrencyLimit limit = ConcurrencyLimit::MakeAdaptive(options);
  absl::Time now = absl::UnixEpoch();
  limit.OnSuccess(absl::Milliseconds(100), now);
  limit.OnOverload(now);
  EXPECT_EQ(limit.limit(), 50);
  // A burst of 429s from the same round trip counts once.
  limit.OnOverload(now + absl::Milliseconds(10));
  limit.OnOverload(now + absl::Milliseconds(20));
  EXPECT_EQ(limit.limit(), 50);
  limit.OnOverload(now + absl::Milliseconds(200));
  EXPECT_EQ(limit.limit(), 25);
}

TEST(ConcurrencyLimitTest, AdaptiveStaysWithinItsBounds) {
  ConcurrencyLimit::Adaptive options;
  options.initial = 4;
  ConcurrencyLimit limit = ConcurrencyLimit::MakeAdaptive(options);
  absl::Time now = absl::UnixEpoch();
  for (int i = 0; i < 50; ++i) {
    now += absl::Seconds(1);
    limit.OnOverload(now);
  }
  EXPECT_EQ(limit.limit(), 1);
}

}  // namespace
}  // namespace sdg
