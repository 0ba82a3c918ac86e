#include "server/service/job_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

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
    for (const auto& listed : page.jobs) ids.push_back(listed.job_id());
    return ids;
  }
  // Every job listed, as ListJobs pages through them.
  std::vector<std::string> Listed(JobRegistry& registry) {
    auto page = registry.ListPage(anyone_, "", 1000, v1::JOB_STATE_UNSPECIFIED);
    EXPECT_TRUE(page.ok()) << page.status();
    return page.ok() ? Ids(*page) : std::vector<std::string>();
  }
  // An ended job's Job, built from its stored record, as the service does;
  // counted in `loads_`.
  JobRegistry::LoadEnded Loader() {
    return [this](JobRecord record) -> absl::StatusOr<std::shared_ptr<Job>> {
      ++loads_;
      JobSpec spec;
      spec.job_id = record.job_id;
      spec.batch_size = 1;
      spec.num_workers = 1;
      return Job::Restore(std::move(spec), std::move(record), nullptr, store_,
                          metrics_);
    };
  }

  // Authentication off: the one tenant "", which sees every job.
  const Caller anyone_{"", true};
  Metrics metrics_;
  MemoryJobStore store_;
  std::atomic<int> loads_{0};
};

TEST_F(JobRegistryTest, ListsJobsOldestFirstAndFindsThem) {
  JobRegistry registry(absl::Hours(1), store_, Loader());
  ASSERT_TRUE(registry.Add(MakeJob("a")).ok());
  ASSERT_TRUE(registry.Add(MakeJob("b")).ok());
  EXPECT_THAT(Listed(registry), ::testing::ElementsAre("a", "b"));
  EXPECT_TRUE(registry.Find("b", anyone_).ok());
  EXPECT_EQ(registry.Unfinished().size(), 2u);
  EXPECT_EQ(registry.Add(MakeJob("a")).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(JobRegistryTest, FinishedJobsStayForTheRetentionOnly) {
  JobRegistry keeps(absl::Hours(1), store_, Loader());
  JobRegistry forgets(absl::ZeroDuration(), store_, Loader());
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
  JobRegistry registry(absl::ZeroDuration(), store_, Loader());
  ASSERT_TRUE(registry.Add(MakeJob("running")).ok());
  EXPECT_EQ(registry.RemoveExpired(absl::InfiniteFuture()), 0);
  EXPECT_TRUE(registry.Find("running", anyone_).ok());
}

TEST_F(JobRegistryTest, RemoveExpiredForgetsJobsPastTheirRetentionOnly) {
  JobRegistry registry(absl::Hours(1), store_, Loader());
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
  EXPECT_THAT(Listed(registry), ::testing::ElementsAre("running"));
  // Its id is free again.
  EXPECT_TRUE(registry.Add(MakeJob("done")).ok());
}

TEST_F(JobRegistryTest, ExpiredJobsAreNotListedBeforeTheyAreRemoved) {
  JobRegistry registry(absl::ZeroDuration(), store_, Loader());
  auto done = MakeJob("done");
  ASSERT_TRUE(registry.Add(MakeJob("a")).ok());
  ASSERT_TRUE(registry.Add(done).ok());
  ASSERT_TRUE(registry.Add(MakeJob("b")).ok());
  done->MarkFinished();
  auto page = registry.ListPage(anyone_, "", 10, v1::JOB_STATE_UNSPECIFIED);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Ids(*page), ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(registry.Unfinished().size(), 2u);
}

TEST_F(JobRegistryTest, APageSpansMoreJobsThanOneTurnOfTheLockLooksAt) {
  JobRegistry registry(absl::Hours(1), store_, Loader());
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
  JobRegistry registry(absl::Hours(1), store_, Loader());
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
  JobRegistry registry(absl::Hours(1), store_, Loader());
  auto done = MakeJob("done");
  ASSERT_TRUE(registry.Add(MakeJob("queued")).ok());
  ASSERT_TRUE(registry.Add(done).ok());
  done->MarkFinished();  // never ran: it ends SUCCEEDED with no shard
  auto page = registry.ListPage(anyone_, "", 10, v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Ids(*page), ::testing::ElementsAre("queued"));
}

TEST_F(JobRegistryTest, ACallerFindsAndListsItsOwnJobsOnlyAndTheAdminAll) {
  JobRegistry registry(absl::Hours(1), store_, Loader());
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

// An ended job whose record is in the store is let go of and read back
// from the store when asked for: found, listed in its place, filtered by
// its state, and still another tenant's NOT_FOUND.
TEST_F(JobRegistryTest, AnEndedJobIsLetGoOfAndReadBackFromTheStore) {
  JobRegistry registry(absl::Hours(1), store_, Loader());
  auto done = MakeJob("done", "alice");
  ASSERT_TRUE(registry.Add(MakeJob("queued")).ok());
  ASSERT_TRUE(registry.Add(done).ok());
  ASSERT_TRUE(registry.Add(MakeJob("later")).ok());
  done->MarkFinished();
  const v1::Job before = done->Snapshot();
  ASSERT_TRUE(done->IsStoredEnded());
  EXPECT_EQ(registry.ForgetEndedJobs(), 1);
  EXPECT_EQ(registry.ForgetEndedJobs(), 0);  // the others have not ended
  std::weak_ptr<Job> forgotten = done;
  done.reset();
  EXPECT_TRUE(forgotten.expired()) << "the registry still holds the job";

  const Caller alice{"alice", false};
  absl::StatusOr<std::shared_ptr<Job>> found = registry.Find("done", alice);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(loads_, 1);
  EXPECT_EQ((*found)->Snapshot().DebugString(), before.DebugString());
  EXPECT_EQ(registry.Find("done", Caller{"bob", false}).status().code(),
            absl::StatusCode::kNotFound);
  // Each read builds it again: the registry keeps none of it.
  EXPECT_EQ((*registry.Find("done", alice))->Snapshot().DebugString(),
            before.DebugString());
  EXPECT_EQ(loads_, 2);

  EXPECT_THAT(Listed(registry),
              ::testing::ElementsAre("queued", "done", "later"));
  auto succeeded = registry.ListPage(anyone_, "", 10, v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(succeeded.ok());
  EXPECT_THAT(Ids(*succeeded), ::testing::ElementsAre("done"));
  EXPECT_TRUE(registry.Unfinished().size() == 2u);
}

// A job the store holds as ended (as a server finds it when it starts) is
// listed without being read; it expires as any other, and a job deleted
// from the store meanwhile is NOT_FOUND, not an error.
TEST_F(JobRegistryTest, AStoredEndedJobIsListedAndExpiresUnread) {
  JobRegistry registry(absl::Hours(1), store_, Loader());
  for (const char* id : {"old", "gone"}) {
    JobRecord record;
    record.job_id = id;
    record.state = v1::JOB_STATE_CANCELLED;
    record.end_time = absl::Now();
    record.finished.set_state(v1::JOB_STATE_CANCELLED);
    record.last_sequence = 3;
    ASSERT_TRUE(store_.AddJob(record).ok());
    record.version = 1;  // as AddJob stored it
    ASSERT_TRUE(store_.UpdateJob(record).ok());
    ASSERT_TRUE(registry.AddEnded(record).ok());
  }
  EXPECT_EQ(registry.AddEnded(*store_.LoadJob("old")).code(),
            absl::StatusCode::kAlreadyExists);
  auto cancelled = registry.ListPage(anyone_, "", 10, v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->jobs.size(), 2u);
  // Listed from their records: nothing is rebuilt.
  EXPECT_EQ(cancelled->jobs[0].job, nullptr);
  EXPECT_EQ(cancelled->jobs[0].ended.last_sequence, 3u);
  EXPECT_EQ(loads_, 0);
  EXPECT_TRUE(registry.Unfinished().empty());

  ASSERT_TRUE(store_.RemoveJob("gone").ok());
  EXPECT_EQ(registry.Find("gone", anyone_).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(Listed(registry), ::testing::ElementsAre("old"));

  EXPECT_EQ(registry.RemoveExpired(absl::Now() + absl::Hours(2)), 2);
  EXPECT_TRUE(Listed(registry).empty());
  EXPECT_EQ(store_.LoadJob("old").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sdg
