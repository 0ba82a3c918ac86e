// The outage state on its own: down and up, the probes' doubling wait, the
// limit, and detection's backoff, with the time passed in.
#include "server/backend/outage_detector.h"

#include <gtest/gtest.h>

namespace sdg {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

OutageDetector::Options Options() {
  OutageDetector::Options options;
  options.limit = absl::Seconds(10);
  options.first_probe = absl::Milliseconds(250);
  options.max_probe_interval = absl::Seconds(1);
  return options;
}

TEST(OutageDetectorTest, GoesDownOnceAndComesUpOnce) {
  OutageDetector outage(Options());
  EXPECT_FALSE(outage.down());
  EXPECT_FALSE(outage.ComeUp());

  EXPECT_TRUE(outage.GoDown(kT0));
  EXPECT_TRUE(outage.down());
  EXPECT_EQ(outage.down_since(), kT0);
  // Already down: the outage keeps its start.
  EXPECT_FALSE(outage.GoDown(kT0 + absl::Seconds(1)));
  EXPECT_EQ(outage.down_since(), kT0);

  EXPECT_TRUE(outage.ComeUp());
  EXPECT_FALSE(outage.down());
  EXPECT_EQ(outage.down_since(), absl::InfiniteFuture());
}

TEST(OutageDetectorTest, ProbesWaitTwiceAsLongAfterEachFailureUpToTheMax) {
  OutageDetector outage(Options());
  outage.GoDown(kT0);
  EXPECT_FALSE(outage.ProbeDue(kT0 + absl::Milliseconds(249)));
  EXPECT_TRUE(outage.ProbeDue(kT0 + absl::Milliseconds(250)));

  absl::Time now = kT0 + absl::Milliseconds(250);
  outage.ProbeFailed(now);
  EXPECT_EQ(outage.probe_interval(), absl::Milliseconds(500));
  EXPECT_EQ(outage.next_probe(), now + absl::Milliseconds(500));
  outage.ProbeFailed(now);
  EXPECT_EQ(outage.probe_interval(), absl::Seconds(1));
  outage.ProbeFailed(now);
  EXPECT_EQ(outage.probe_interval(), absl::Seconds(1));
  EXPECT_EQ(outage.probes_failed(), 3);
}

TEST(OutageDetectorTest, ANewOutageStartsFromTheFirstProbeAgain) {
  OutageDetector outage(Options());
  outage.GoDown(kT0);
  outage.ProbeFailed(kT0);
  outage.ProbeFailed(kT0);
  outage.ComeUp();

  const absl::Time later = kT0 + absl::Minutes(1);
  outage.GoDown(later);
  EXPECT_EQ(outage.probes_failed(), 0);
  EXPECT_EQ(outage.next_probe(), later + absl::Milliseconds(250));
}

TEST(OutageDetectorTest, TheLimitComesFromWhenItWentDown) {
  OutageDetector outage(Options());
  EXPECT_FALSE(outage.PastLimit(kT0 + absl::Hours(1)));  // up
  outage.GoDown(kT0);
  EXPECT_EQ(outage.limit_at(), kT0 + absl::Seconds(10));
  EXPECT_FALSE(outage.PastLimit(kT0 + absl::Milliseconds(9999)));
  EXPECT_TRUE(outage.PastLimit(kT0 + absl::Seconds(10)));
}

TEST(OutageDetectorTest, TheNextProbeIsNoLaterThanTheLimit) {
  OutageDetector::Options options = Options();
  options.limit = absl::Milliseconds(600);
  OutageDetector outage(options);
  outage.GoDown(kT0);
  outage.ProbeFailed(kT0 + absl::Milliseconds(250));  // next at 750 ms
  EXPECT_EQ(outage.next_probe(), kT0 + absl::Milliseconds(600));
}

TEST(OutageDetectorTest, DetectionIsAskedAgainOnADoublingWaitUntilItAnswers) {
  OutageDetector outage(Options());
  EXPECT_EQ(outage.DetectionFailed(), absl::Milliseconds(250));
  EXPECT_EQ(outage.DetectionFailed(), absl::Milliseconds(500));
  EXPECT_EQ(outage.DetectionFailed(), absl::Seconds(1));
  EXPECT_EQ(outage.DetectionFailed(), absl::Seconds(1));
  outage.DetectionAnswered();
  EXPECT_EQ(outage.DetectionFailed(), absl::Milliseconds(250));
}

TEST(OutageDetectorTest, AZeroLimitTurnsOutageHandlingOff) {
  OutageDetector::Options options = Options();
  EXPECT_TRUE(OutageDetector(options).enabled());
  options.limit = absl::ZeroDuration();
  EXPECT_FALSE(OutageDetector(options).enabled());
}

}  // namespace
}  // namespace sdg
