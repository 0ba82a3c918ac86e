// Round-robin across jobs with real HTTP: a small job submitted while a huge
// one occupies every worker finishes while the huge one is still running.
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

class FairnessTest : public ServiceFixture {
 protected:
  SimThread sim_{WithLatency(absl::Milliseconds(10))};
};

TEST_F(FairnessTest, SmallJobFinishesWhileTheBigOneRuns) {
  ServerOptions options;
  options.scheduler.max_workers = 4;
  StartServer({{"sim", sim_.url()}}, options);

  // 100,000 one-row shards at 10 ms over 4 workers: minutes of work.
  v1::GenerateJobRequest big = Request(100000);
  big.set_job_id("big");
  big.set_batch_size(1);
  big.set_num_workers(4);
  auto big_call = RunInBackground(big);
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<v1::Job> job = GetJob("big");
    return job.ok() && job->rows_succeeded() > 0;
  }));

  Events small = Run(Request(4));
  EXPECT_EQ(small.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(GetJob("big")->state(), v1::JOB_STATE_RUNNING);

  ASSERT_TRUE(CancelJob("big").ok());
  Events big_events = big_call->Wait();
  EXPECT_EQ(big_events.Finished().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_LT(big_events.Finished().rows_succeeded(), 100000);
}

}  // namespace
}  // namespace sdg::testing
