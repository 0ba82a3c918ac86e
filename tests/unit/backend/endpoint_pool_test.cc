#include "server/backend/endpoint_pool.h"

#include <gtest/gtest.h>

namespace sdg {
namespace {

const absl::Time kStart = absl::UnixEpoch() + absl::Hours(1);

HttpResponse Http(long code) {
  HttpResponse response;
  response.http_code = code;
  response.elapsed = absl::Milliseconds(10);
  return response;
}

HttpResponse Refused() {
  HttpResponse response;
  response.transport = absl::UnavailableError("connection refused");
  return response;
}

EndpointPool Pool(int endpoints, int limit, int eject_after = 2) {
  std::vector<std::string> urls;
  for (int i = 0; i < endpoints; ++i) {
    urls.push_back("http://e" + std::to_string(i) + "/v1");
  }
  return EndpointPool(urls, ConcurrencyLimit::Fixed(limit),
                      {.eject_after_failures = eject_after,
                       .eject_cooldown = absl::Seconds(10)});
}

TEST(EndpointPoolTest, TheLeastLoadedEndpointWinsAndTiesGoInTurn) {
  EndpointPool pool = Pool(3, 4);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 0);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 1);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 2);
  pool.Release(1, Http(200), kStart);  // e1 now has the fewest in flight
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 1);
}

TEST(EndpointPoolTest, NoEndpointOverItsLimit) {
  EndpointPool pool = Pool(2, 2);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(pool.Acquire(EndpointPool::kNoneFree, kStart),
              EndpointPool::kNoneFree);
  }
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart),
            EndpointPool::kNoneFree);
  pool.Release(0, Http(200), kStart);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 0);
}

TEST(EndpointPoolTest, ARetryAvoidsTheEndpointThatFailedIfAnotherHasRoom) {
  EndpointPool pool = Pool(2, 4);
  EXPECT_EQ(pool.Acquire(/*avoid=*/0, kStart), 1);
  EXPECT_EQ(pool.Acquire(/*avoid=*/1, kStart), 0);
  // e1 is full: the failed endpoint is better than none.
  EndpointPool small = Pool(2, 1);
  EXPECT_EQ(small.Acquire(EndpointPool::kNoneFree, kStart), 0);
  EXPECT_EQ(small.Acquire(/*avoid=*/1, kStart), 1);
}

TEST(EndpointPoolTest, FailuresInARowEjectForTheCooldownThenOneTrial) {
  EndpointPool pool = Pool(2, 4, /*eject_after=*/2);
  ASSERT_EQ(pool.Acquire(1, kStart), 0);
  EXPECT_EQ(pool.Release(0, Refused(), kStart), EndpointPool::Change::kNone);
  ASSERT_EQ(pool.Acquire(1, kStart), 0);
  EXPECT_EQ(pool.Release(0, Http(503), kStart), EndpointPool::Change::kEjected);
  EXPECT_EQ(pool.last_error(0), "HTTP 503");

  // Ejected: everything goes to e1 until the cool-down ends.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pool.Acquire(0, kStart), 1);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart + absl::Seconds(9)),
            EndpointPool::kNoneFree);
  // After it: exactly one trial request.
  const absl::Time later = kStart + absl::Seconds(10);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, later), 0);
  EXPECT_EQ(pool.Acquire(EndpointPool::kNoneFree, later),
            EndpointPool::kNoneFree);
  EXPECT_EQ(pool.Release(0, Http(200), later), EndpointPool::Change::kReturned);
  EXPECT_EQ(pool.consecutive_failures(0), 0);
}

TEST(EndpointPoolTest, AFailedTrialStartsAnotherCooldown) {
  EndpointPool pool = Pool(2, 4, /*eject_after=*/1);
  ASSERT_EQ(pool.Acquire(1, kStart), 0);
  ASSERT_EQ(pool.Release(0, Refused(), kStart), EndpointPool::Change::kEjected);
  const absl::Time trial = kStart + absl::Seconds(10);
  ASSERT_EQ(pool.Acquire(1, trial), 0);
  EXPECT_EQ(pool.Release(0, Refused(), trial), EndpointPool::Change::kNone);
  EXPECT_EQ(pool.Acquire(1, trial + absl::Seconds(9)), 1);
}

TEST(EndpointPoolTest, TheLastEndpointInRotationIsNeverEjected) {
  EndpointPool pool = Pool(1, 4, /*eject_after=*/1);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(pool.Acquire(0, kStart), 0);
    EXPECT_EQ(pool.Release(0, Refused(), kStart), EndpointPool::Change::kNone);
  }
  EXPECT_EQ(pool.Acquire(0, kStart), 0);
  EXPECT_FALSE(pool.EveryEndpointFailing());  // one endpoint: not a pool
}

TEST(EndpointPoolTest, ClientErrorsAndCancellationsDoNotCountAsFailures) {
  EndpointPool pool = Pool(2, 4, /*eject_after=*/1);
  ASSERT_EQ(pool.Acquire(1, kStart), 0);
  EXPECT_EQ(pool.Release(0, Http(400), kStart), EndpointPool::Change::kNone);
  ASSERT_EQ(pool.Acquire(1, kStart), 0);
  HttpResponse cancelled;
  cancelled.transport = absl::CancelledError("request cancelled");
  EXPECT_EQ(pool.Release(0, cancelled, kStart), EndpointPool::Change::kNone);
  EXPECT_EQ(pool.consecutive_failures(0), 0);
}

TEST(EndpointPoolTest, EveryEndpointFailingNamesEachWithItsLastError) {
  EndpointPool pool = Pool(2, 4, /*eject_after=*/5);
  ASSERT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 0);
  ASSERT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 1);
  pool.Release(0, Refused(), kStart);
  EXPECT_FALSE(pool.EveryEndpointFailing());
  pool.Release(1, Http(502), kStart);
  EXPECT_TRUE(pool.EveryEndpointFailing());
  EXPECT_EQ(pool.FailureSummary(),
            "http://e0/v1 (connection refused), http://e1/v1 (HTTP 502)");
}

TEST(EndpointPoolTest, OverloadHalvesAnAdaptiveLimitAndFixingTheLimitSetsAll) {
  EndpointPool pool({"http://a/v1", "http://b/v1"},
                    ConcurrencyLimit::MakeAdaptive({.initial = 16}), {});
  EXPECT_EQ(pool.TotalLimit(), 32);
  ASSERT_EQ(pool.Acquire(EndpointPool::kNoneFree, kStart), 0);
  pool.Release(0, Http(429), kStart);
  EXPECT_EQ(pool.TotalLimit(), 24);
  pool.SetFixedLimit(4);
  EXPECT_EQ(pool.TotalLimit(), 8);
}

TEST(EndpointPoolTest, OutageSignsAreWhatAServerThatIsNotThereGives) {
  EXPECT_TRUE(EndpointPool::IsOutageSign(Refused()));
  HttpResponse timeout;
  timeout.transport = absl::DeadlineExceededError("timed out");
  EXPECT_TRUE(EndpointPool::IsOutageSign(timeout));
  for (long code : {502, 503, 504}) {
    EXPECT_TRUE(EndpointPool::IsOutageSign(Http(code))) << code;
  }
  // A live server that refuses one request, or fails it once.
  for (long code : {200, 400, 429, 500}) {
    EXPECT_FALSE(EndpointPool::IsOutageSign(Http(code))) << code;
  }
  HttpResponse cancelled;
  cancelled.transport = absl::CancelledError("cancelled");
  EXPECT_FALSE(EndpointPool::IsOutageSign(cancelled));
}

TEST(EndpointPoolTest, DownOnlyWhenEveryEndpointGaveOutageSignsInARow) {
  EndpointPool pool = Pool(2, 4, /*eject_after=*/100);
  auto attempt = [&](int endpoint, const HttpResponse& response) {
    while (pool.Acquire(1 - endpoint, kStart) != endpoint) {
    }
    pool.Release(endpoint, response, kStart);
  };
  attempt(0, Refused());
  attempt(0, Refused());
  EXPECT_FALSE(pool.EveryEndpointDown(2));  // e1 has not failed
  attempt(1, Http(503));
  attempt(1, Http(400));  // a live server answered
  EXPECT_FALSE(pool.EveryEndpointDown(2));
  attempt(1, Http(503));
  attempt(1, Http(502));
  EXPECT_TRUE(pool.EveryEndpointDown(2));
}

}  // namespace
}  // namespace sdg
