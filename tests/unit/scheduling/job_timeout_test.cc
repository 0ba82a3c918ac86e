// A job's timeout on timers the test fires: armed only when the job has
// one, it cancels the job with DEADLINE_EXCEEDED; it is disarmed by its
// owner's end, once, wherever it was moved.
#include "server/scheduling/job_timeout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

#include "server/store/memory_job_store.h"
#include "tests/testing/manual_timers.h"
#include "tests/testing/test_jobs.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class JobTimeoutTest : public ::testing::Test {
 protected:
  std::shared_ptr<Job> MakeJob(std::optional<absl::Duration> timeout) {
    JobSpec spec;
    spec.job_id = "timed";
    spec.batch_size = 1;
    spec.timeout = timeout;
    return testing::MakeTestJob(std::move(spec), 1, store_, metrics_);
  }

  Metrics metrics_;
  MemoryJobStore store_;
  testing::ManualTimers timers_;
};

TEST_F(JobTimeoutTest, APassedTimeoutCancelsTheJobSayingWhich) {
  std::shared_ptr<Job> job = MakeJob(absl::Minutes(5));
  JobTimeout timeout(timers_, job);
  EXPECT_THAT(timers_.ArmedDelays(), ElementsAre(absl::Minutes(5)));

  timers_.FireAll();
  ASSERT_TRUE(job->token().IsCancelled());
  EXPECT_EQ(job->token().reason().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(job->token().reason().message(), "the job's timeout of 5m passed");
}

TEST_F(JobTimeoutTest, AJobWithoutATimeoutArmsNothing) {
  std::shared_ptr<Job> job = MakeJob(std::nullopt);
  JobTimeout timeout(timers_, job);
  EXPECT_THAT(timers_.ArmedDelays(), IsEmpty());
}

TEST_F(JobTimeoutTest, TheLastOwnerDisarmsIt) {
  std::shared_ptr<Job> job = MakeJob(absl::Seconds(30));
  JobTimeout moved;
  {
    JobTimeout armed(timers_, job);
    moved = std::move(armed);
  }
  // The moved-from timeout went without disarming the timer.
  EXPECT_THAT(timers_.ArmedDelays(), ElementsAre(absl::Seconds(30)));
  moved = JobTimeout();
  EXPECT_THAT(timers_.ArmedDelays(), IsEmpty());
  EXPECT_FALSE(job->token().IsCancelled());
}

}  // namespace
}  // namespace sdg
