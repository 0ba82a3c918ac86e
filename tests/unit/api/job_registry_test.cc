#include "server/api/job_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

using ::testing::HasSubstr;

class NullSink final : public JobSink {
 public:
  void Emit(v1::JobEvent) override {}
  void Close() override {}
};

class JobRegistryTest : public ::testing::Test {
 protected:
  std::shared_ptr<Job> MakeJob(const std::string& id) {
    JobSpec spec;
    spec.job_id = id;
    spec.rows.resize(1);
    spec.batch_size = 1;
    spec.num_workers = 1;
    return std::make_shared<Job>(std::move(spec), std::make_shared<NullSink>(),
                                 metrics_);
  }

  Metrics metrics_;
};

TEST_F(JobRegistryTest, ListsJobsOldestFirstAndFindsThem) {
  JobRegistry registry(absl::Hours(1));
  ASSERT_TRUE(registry.Add(MakeJob("a")).ok());
  ASSERT_TRUE(registry.Add(MakeJob("b")).ok());
  auto jobs = registry.List();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]->id(), "a");
  EXPECT_EQ(jobs[1]->id(), "b");
  EXPECT_TRUE(registry.Find("b").ok());
  EXPECT_EQ(registry.Unfinished().size(), 2u);
}

TEST_F(JobRegistryTest, FinishedJobsStayForTheRetentionOnly) {
  JobRegistry keeps(absl::Hours(1));
  JobRegistry forgets(absl::ZeroDuration());
  auto job = MakeJob("done");
  ASSERT_TRUE(keeps.Add(job).ok());
  ASSERT_TRUE(forgets.Add(job).ok());
  job->MarkFinished();
  EXPECT_TRUE(keeps.Find("done").ok());
  EXPECT_TRUE(keeps.Unfinished().empty());
  absl::Status gone = forgets.Find("done").status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("finished jobs are kept for 0"));
}

TEST_F(JobRegistryTest, RunningJobsAreNeverPruned) {
  JobRegistry registry(absl::ZeroDuration());
  ASSERT_TRUE(registry.Add(MakeJob("running")).ok());
  EXPECT_TRUE(registry.Find("running").ok());
}

}  // namespace
}  // namespace sdg
