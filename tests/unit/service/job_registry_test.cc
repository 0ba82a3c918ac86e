#include "server/service/job_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_jobs.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

class JobRegistryTest : public ::testing::Test {
 protected:
  std::shared_ptr<Job> MakeJob(const std::string& id,
                               const std::string& tenant = "") {
    JobSpec spec;
    spec.job_id = id;
    spec.batch_size = 1;
    spec.num_workers = 1;
    return testing::MakeTestJob(std::move(spec), 1, store_, metrics_, tenant);
  }
  static std::vector<std::string> Ids(const JobRegistry::Page& page) {
    std::vector<std::string> ids;
    for (const auto& job : page.jobs) ids.push_back(job->id());
    return ids;
  }

  // Authentication off: the one tenant "", which sees every job.
  const Caller anyone_{"", true};
  Metrics metrics_;
  MemoryJobStore store_;
};

TEST_F(JobRegistryTest, ListsJobsOldestFirstAndFindsThem) {
  JobRegistry registry(absl::Hours(1), store_);
  ASSERT_TRUE(registry.Add(MakeJob("a")).ok());
  ASSERT_TRUE(registry.Add(MakeJob("b")).ok());
  auto jobs = registry.List();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]->id(), "a");
  EXPECT_EQ(jobs[1]->id(), "b");
  EXPECT_TRUE(registry.Find("b", anyone_).ok());
  EXPECT_EQ(registry.Unfinished().size(), 2u);
  EXPECT_EQ(registry.Add(MakeJob("a")).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(JobRegistryTest, FinishedJobsStayForTheRetentionOnly) {
  JobRegistry keeps(absl::Hours(1), store_);
  JobRegistry forgets(absl::ZeroDuration(), store_);
  auto job = MakeJob("done");
  ASSERT_TRUE(keeps.Add(job).ok());
  ASSERT_TRUE(forgets.Add(job).ok());
  job->MarkFinished();
  EXPECT_TRUE(keeps.Find("done", anyone_).ok());
  EXPECT_TRUE(keeps.Unfinished().empty());
  absl::Status gone = forgets.Find("done", anyone_).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("finished jobs are kept for 0"));
}

TEST_F(JobRegistryTest, RunningJobsAreNeverPruned) {
  JobRegistry registry(absl::ZeroDuration(), store_);
  ASSERT_TRUE(registry.Add(MakeJob("running")).ok());
  EXPECT_EQ(registry.RemoveExpired(absl::InfiniteFuture()), 0);
  EXPECT_TRUE(registry.Find("running", anyone_).ok());
}

TEST_F(JobRegistryTest, RemoveExpiredForgetsJobsPastTheirRetentionOnly) {
  JobRegistry registry(absl::Hours(1), store_);
  auto done = MakeJob("done");
  auto later = MakeJob("later");
  ASSERT_TRUE(registry.Add(done).ok());
  ASSERT_TRUE(registry.Add(later).ok());
  ASSERT_TRUE(registry.Add(MakeJob("running")).ok());
  done->MarkFinished();
  const absl::Time done_end = done->end_time();
  later->MarkFinished();

  // Within the hour nothing goes.
  EXPECT_EQ(registry.RemoveExpired(done_end + absl::Minutes(59)), 0);
  EXPECT_TRUE(registry.Find("done", anyone_).ok());
  // An hour after both ended they go; "running" never ended.
  EXPECT_EQ(registry.RemoveExpired(later->end_time() + absl::Hours(1)), 2);
  EXPECT_EQ(registry.RemoveExpired(absl::InfiniteFuture()), 0);
  EXPECT_EQ(registry.List().size(), 1u);
  EXPECT_EQ(registry.List()[0]->id(), "running");
  // Its id is free again.
  EXPECT_TRUE(registry.Add(MakeJob("done")).ok());
}

TEST_F(JobRegistryTest, ExpiredJobsAreNotListedBeforeTheyAreRemoved) {
  JobRegistry registry(absl::ZeroDuration(), store_);
  auto done = MakeJob("done");
  ASSERT_TRUE(registry.Add(MakeJob("a")).ok());
  ASSERT_TRUE(registry.Add(done).ok());
  ASSERT_TRUE(registry.Add(MakeJob("b")).ok());
  done->MarkFinished();
  auto page = registry.ListPage(anyone_, "", 10, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Ids(*page), ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(registry.List().size(), 2u);
  EXPECT_EQ(registry.Unfinished().size(), 2u);
}

TEST_F(JobRegistryTest, APageSpansMoreJobsThanOneTurnOfTheLockLooksAt) {
  JobRegistry registry(absl::Hours(1), store_);
  // 600 of bob's jobs between alice's first and second: more than the
  // registry looks at per turn of its lock.
  ASSERT_TRUE(registry.Add(MakeJob("a1", "alice")).ok());
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(registry.Add(MakeJob(absl::StrCat("b", i), "bob")).ok());
  }
  ASSERT_TRUE(registry.Add(MakeJob("a2", "alice")).ok());
  const Caller alice{"alice", false};
  auto page = registry.ListPage(alice, "", 10, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Ids(*page), ::testing::ElementsAre("a1", "a2"));
  EXPECT_EQ(page->next_page_token, "");
  auto first = registry.ListPage(alice, "", 1, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(Ids(*first), ::testing::ElementsAre("a1"));
  auto second = registry.ListPage(alice, first->next_page_token, 1,
                                  v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(second.ok());
  EXPECT_THAT(Ids(*second), ::testing::ElementsAre("a2"));
}

TEST_F(JobRegistryTest, PagesFollowEachOtherWithoutGapOrRepeat) {
  JobRegistry registry(absl::Hours(1), store_);
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    ASSERT_TRUE(registry.Add(MakeJob(id)).ok());
  }
  auto first = registry.ListPage(anyone_, "", 2, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(Ids(*first), ::testing::ElementsAre("a", "b"));
  // A job removed between pages does not shift the next page.
  registry.Remove("c");
  auto second = registry.ListPage(anyone_, first->next_page_token, 2,
                                  v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(second.ok());
  EXPECT_THAT(Ids(*second), ::testing::ElementsAre("d", "e"));
  EXPECT_EQ(second->next_page_token, "");
  EXPECT_EQ(registry.ListPage(anyone_, "x", 2, v1::JOB_STATE_UNSPECIFIED)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobRegistryTest, StateFilterSkipsOtherJobs) {
  JobRegistry registry(absl::Hours(1), store_);
  auto done = MakeJob("done");
  ASSERT_TRUE(registry.Add(MakeJob("queued")).ok());
  ASSERT_TRUE(registry.Add(done).ok());
  done->MarkFinished();  // never ran: it ends SUCCEEDED with no shard
  auto page = registry.ListPage(anyone_, "", 10, v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Ids(*page), ::testing::ElementsAre("queued"));
}

TEST_F(JobRegistryTest, ACallerFindsAndListsItsOwnJobsOnlyAndTheAdminAll) {
  JobRegistry registry(absl::Hours(1), store_);
  ASSERT_TRUE(registry.Add(MakeJob("a1", "alice")).ok());
  ASSERT_TRUE(registry.Add(MakeJob("b1", "bob")).ok());
  ASSERT_TRUE(registry.Add(MakeJob("a2", "alice")).ok());
  const Caller alice{"alice", false};
  const Caller bob{"bob", false};
  const Caller admin{"admin", true};

  EXPECT_TRUE(registry.Find("a1", alice).ok());
  absl::Status hidden = registry.Find("a1", bob).status();
  // Word for word what an id nobody has gets: nothing tells it exists.
  absl::Status absent = registry.Find("zz", bob).status();
  EXPECT_EQ(hidden.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(hidden.message(),
            std::string(absent.message())
                .replace(absent.message().find("\"zz\""), 4, "\"a1\""));
  EXPECT_TRUE(registry.Find("b1", admin).ok());

  auto alices = registry.ListPage(alice, "", 1, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(alices.ok());
  EXPECT_THAT(Ids(*alices), ::testing::ElementsAre("a1"));
  // The next page skips bob's job between alice's two.
  auto next = registry.ListPage(alice, alices->next_page_token, 1,
                                v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(Ids(*next), ::testing::ElementsAre("a2"));
  EXPECT_EQ(next->next_page_token, "");
  auto bobs = registry.ListPage(bob, "", 10, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(bobs.ok());
  EXPECT_THAT(Ids(*bobs), ::testing::ElementsAre("b1"));
  auto all = registry.ListPage(admin, "", 10, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(Ids(*all), ::testing::ElementsAre("a1", "b1", "a2"));
}

}  // namespace
}  // namespace sdg
