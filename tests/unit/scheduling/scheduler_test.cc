// The scheduler with an in-process runner whose shards finish only when the
// test lets them: every assertion is about order and counts, never time.
#include "server/scheduling/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tests/testing/http_get.h"
#include "tests/testing/latched_store.h"
#include "tests/testing/manual_timers.h"
#include "tests/testing/test_jobs.h"
#include "tests/testing/test_pipelines.h"

namespace sdg {
namespace {

using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// Records which shards ran, in order; holds them while the gate is closed.
class GatedRunner final : public BlockingShardRunner {
 public:
  // A pipeline stage's rows pass through.
  ShardOutcome Run(const JobSpec& spec, const ShardSpec& shard,
                   ShardInput input, CancellationToken& token) override {
    auto registration = token.OnCancel([this] {
      absl::MutexLock lock(&mu_);
      ++cancellations_;
    });
    absl::MutexLock lock(&mu_);
    // "job:3", or "job:1/3" for a pipeline's later stage.
    started_.push_back(
        spec.job_id + ":" +
        (shard.stage == 0 ? "" : std::to_string(shard.stage) + "/") +
        std::to_string(shard.index));
    ++running_;
    max_running_ = std::max(max_running_, running_);
    int seen_cancellations = cancellations_;
    auto released = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return open_ || token.IsCancelled() ||
             cancellations_ > seen_cancellations;
    };
    mu_.Await(absl::Condition(&released));
    --running_;
    ShardOutcome outcome;
    if (token.IsCancelled()) {
      outcome.status = token.reason();
    } else if (fail_shard_ == shard.index) {
      outcome.status =
          absl::InvalidArgumentError("backend returned HTTP 400: no");
      outcome.attempts = 1;
    } else if (auto* stage = std::get_if<StageInput>(&input)) {
      outcome.rows = std::move(stage->rows);
    }
    return outcome;
  }

  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  void AwaitRunning(int count) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return running_ >= count;
    };
    mu_.Await(absl::Condition(&enough));
  }
  std::vector<std::string> started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  int max_running() {
    absl::MutexLock lock(&mu_);
    return max_running_;
  }
  void FailShard(int64_t index) {
    absl::MutexLock lock(&mu_);
    fail_shard_ = index;
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int max_running_ ABSL_GUARDED_BY(mu_) = 0;
  int cancellations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fail_shard_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::string> started_ ABSL_GUARDED_BY(mu_);
};

// Parks each block shard it starts, holding no thread, until the test
// resumes it from its own thread (as the HTTP loop's last reply does).
class ParkingRunner final : public ShardRunner {
 public:
  struct Finished {
    int64_t shard;
    std::thread::id thread;  // where its continuation ran
    int started_by_then;     // shards started when it ran
  };

  // The test runs no pipeline.
  void Start(const JobSpec&, const ShardSpec& shard, ShardInput input,
             CancellationToken&, Ready ready) override {
    EXPECT_TRUE(std::holds_alternative<BlockInput>(input))
        << "a pipeline shard reached ParkingRunner";
    absl::MutexLock lock(&mu_);
    parked_.push_back({shard.index, std::move(ready)});
    ++started_;
  }

  void AwaitParked(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return parked_.size() >= count;
    };
    mu_.Await(absl::Condition(&enough));
  }
  // Resumes the shard parked first, from the calling thread.
  void ResumeOldest() {
    Parked parked;
    {
      absl::MutexLock lock(&mu_);
      parked = std::move(parked_.front());
      parked_.pop_front();
    }
    parked.ready([this, shard = parked.shard] {
      absl::MutexLock lock(&mu_);
      finished_.push_back({shard, std::this_thread::get_id(), started_});
      return std::optional<ShardOutcome>(ShardOutcome{});
    });
  }
  std::vector<Finished> finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }

 private:
  struct Parked {
    int64_t shard = 0;
    Ready ready;
  };
  absl::Mutex mu_;
  std::deque<Parked> parked_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Finished> finished_ ABSL_GUARDED_BY(mu_);
};

TEST(SchedulerStartedShardsTest,
     InFlightShardsHoldNoThreadButCountInMaxWorkers) {
  Metrics metrics;
  MemoryJobStore store;
  testing::ManualTimers timers;
  ParkingRunner runner;
  Scheduler::Options options;
  options.max_workers = 2;
  Scheduler scheduler(options, runner, timers, metrics);
  JobSpec spec;
  spec.job_id = "parked";
  spec.batch_size = 1;
  spec.num_workers = 4;
  std::shared_ptr<Job> job =
      testing::MakeTestJob(std::move(spec), 4, store, metrics);
  testing::JobEvents events;
  events.Watch(job);
  ASSERT_TRUE(scheduler.Submit(job).ok());

  // Both workers are free again, but two shards are in progress: the third
  // starts only once one of them has finished.
  // Two workers start shards 0 and 1 at once, and either may park first.
  runner.AwaitParked(2);
  runner.ResumeOldest();
  runner.AwaitParked(2);  // the other of the first two, and shard 2
  runner.ResumeOldest();
  runner.AwaitParked(2);
  runner.ResumeOldest();
  runner.ResumeOldest();
  std::vector<LogEvent> all = events.AwaitClosed();
  ASSERT_TRUE(all.back().has_finished());
  EXPECT_EQ(all.back().finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(all.back().finished().shards_succeeded(), 4);

  std::vector<ParkingRunner::Finished> finished = runner.finished();
  ASSERT_EQ(finished.size(), 4u);
  // The first finish ran before a third shard could start, the second
  // after the third had started (the test waited for it) and before the
  // fourth could.
  EXPECT_EQ(finished[0].started_by_then, 2);
  EXPECT_EQ(finished[1].started_by_then, 3);
  std::vector<int64_t> shards;
  for (const ParkingRunner::Finished& f : finished) {
    shards.push_back(f.shard);
    // Finished by a scheduler worker, not by the thread that resumed it.
    EXPECT_NE(f.thread, std::this_thread::get_id()) << f.shard;
  }
  EXPECT_THAT(shards, UnorderedElementsAre(0, 1, 2, 3));
  EXPECT_THAT(std::vector<int64_t>(shards.begin(), shards.begin() + 2),
              UnorderedElementsAre(0, 1));
}

using RecordingSink = testing::JobEvents;

class SchedulerTest : public ::testing::Test {
 protected:
  void StartScheduler(int max_workers, int max_jobs = 16, int max_queued = 64,
                      int tenant_max_jobs = 16, int tenant_max_queued = 64) {
    Scheduler::Options options;
    options.max_workers = max_workers;
    options.max_jobs = max_jobs;
    options.max_queued_jobs = max_queued;
    options.tenant_max_jobs = tenant_max_jobs;
    options.tenant_max_queued_jobs = tenant_max_queued;
    scheduler_ =
        std::make_unique<Scheduler>(options, runner_, timers_, metrics_);
  }

  std::shared_ptr<Job> MakeJob(
      const std::string& id, int shards, int num_workers,
      std::shared_ptr<RecordingSink> sink,
      v1::ErrorPolicy policy = v1::ERROR_POLICY_CONTINUE,
      std::optional<absl::Duration> timeout = std::nullopt,
      const std::string& tenant = "") {
    JobSpec spec;
    spec.job_id = id;
    spec.batch_size = 1;
    spec.num_workers = num_workers;
    spec.error_policy = policy;
    spec.timeout = timeout;
    std::shared_ptr<Job> job =
        testing::MakeTestJob(std::move(spec), shards, store_, metrics_, tenant);
    sink->Watch(job);
    return job;
  }
  // Submits a job of `tenant`'s with its own sink, kept for
  // AwaitTenantJobsClosed.
  void SubmitTenantJob(const std::string& tenant, const std::string& id,
                       int shards) {
    tenant_sinks_.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(
        scheduler_->Submit(TenantJob(tenant, id, shards, tenant_sinks_.back()))
            .ok());
  }
  void AwaitTenantJobsClosed() {
    for (auto& sink : tenant_sinks_) sink->AwaitClosed();
  }
  std::shared_ptr<Job> TenantJob(const std::string& tenant,
                                 const std::string& id, int shards,
                                 std::shared_ptr<RecordingSink> sink) {
    return MakeJob(id, shards, 4, std::move(sink), v1::ERROR_POLICY_CONTINUE,
                   std::nullopt, tenant);
  }

  static v1::JobFinished Finished(const std::vector<LogEvent>& events) {
    EXPECT_TRUE(events.back().has_finished());
    return events.back().finished();
  }

  Metrics metrics_;
  testing::LatchedStore store_;
  testing::ManualTimers timers_;
  GatedRunner runner_;
  std::vector<std::shared_ptr<RecordingSink>> tenant_sinks_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, ShardsOfConcurrentJobsAlternate) {
  StartScheduler(/*max_workers=*/1);
  auto big_sink = std::make_shared<RecordingSink>();
  auto small_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("big", 6, 4, big_sink)).ok());
  runner_.AwaitRunning(1);  // the only worker holds big:0
  ASSERT_TRUE(scheduler_->Submit(MakeJob("small", 2, 4, small_sink)).ok());
  runner_.Open();
  small_sink->AwaitClosed();
  big_sink->AwaitClosed();
  EXPECT_THAT(runner_.started(),
              ElementsAre("big:0", "small:0", "big:1", "small:1", "big:2",
                          "big:3", "big:4", "big:5"));
}

TEST_F(SchedulerTest, TenantsTakeTurnsBeforeTheirJobsDo) {
  StartScheduler(/*max_workers=*/1);
  SubmitTenantJob("alice", "a1", 4);
  runner_.AwaitRunning(1);  // the only worker holds a1:0
  SubmitTenantJob("alice", "a2", 4);
  SubmitTenantJob("alice", "a3", 4);
  SubmitTenantJob("bob", "b1", 4);
  runner_.Open();
  AwaitTenantJobsClosed();
  // Bob's one job gets every other shard while it has any: half the
  // workers, not a quarter (one job of four).
  std::vector<std::string> started = runner_.started();
  ASSERT_EQ(started.size(), 16u);
  std::vector<int> bob_turns;
  for (int i = 0; i < static_cast<int>(started.size()); ++i) {
    if (started[i].starts_with("b1:")) bob_turns.push_back(i);
  }
  EXPECT_THAT(bob_turns, ElementsAre(1, 3, 5, 7));
  // Between bob's turns, alice's jobs take theirs: each of her three ran
  // before any ran twice.
  EXPECT_THAT(std::vector<std::string>({started[0], started[2], started[4]}),
              UnorderedElementsAre("a1:0", "a2:0", "a3:0"));
}

TEST_F(SchedulerTest, TenantLimitsQueueThenRejectNamingTheTenant) {
  StartScheduler(/*max_workers=*/1, /*max_jobs=*/4, /*max_queued=*/8,
                 /*tenant_max_jobs=*/1, /*tenant_max_queued=*/1);
  auto sink = std::make_shared<RecordingSink>();
  auto a1 = TenantJob("alice", "a1", 1, sink);
  auto a2 = TenantJob("alice", "a2", 1, std::make_shared<RecordingSink>());
  ASSERT_TRUE(scheduler_->Submit(a1).ok());
  runner_.AwaitRunning(1);
  ASSERT_TRUE(scheduler_->Submit(a2).ok());
  // The server has free run slots; alice does not.
  EXPECT_EQ(a2->Snapshot().state(), v1::JOB_STATE_QUEUED);
  absl::Status rejected = scheduler_->Submit(
      TenantJob("alice", "a3", 1, std::make_shared<RecordingSink>()));
  EXPECT_EQ(rejected.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(rejected.message(),
            "tenant \"alice\" is at its limit of 1 running and 1 queued jobs "
            "(--tenant_max_jobs, --tenant_max_queued_jobs); wait for one to "
            "finish, or cancel one");
  // Bob is not held back by alice's queue.
  auto b1 = TenantJob("bob", "b1", 1, std::make_shared<RecordingSink>());
  ASSERT_TRUE(scheduler_->Submit(b1).ok());
  EXPECT_EQ(b1->Snapshot().state(), v1::JOB_STATE_RUNNING);
  runner_.Open();
  EXPECT_TRUE(a2->AwaitFinished(absl::InfiniteFuture()));
  EXPECT_TRUE(b1->AwaitFinished(absl::InfiniteFuture()));
  EXPECT_EQ(a2->Snapshot().state(), v1::JOB_STATE_SUCCEEDED);
}

// A tenant's queued and running jobs hold their prompt tokens until they
// end; another tenant's count apart, and a resumed job counts but is not
// refused.
TEST_F(SchedulerTest, EnqueuedTokensAreCountedPerTenantUntilAJobEnds) {
  Scheduler::Options options;
  options.max_workers = 1;
  options.tenant_max_enqueued_tokens = 100;
  scheduler_ = std::make_unique<Scheduler>(options, runner_, timers_, metrics_);
  auto job = [this](const std::string& tenant, const std::string& id,
                    int64_t tokens) {
    JobSpec spec;
    spec.job_id = id;
    spec.batch_size = 1;
    spec.num_workers = 1;
    spec.enqueued_tokens = tokens;
    return testing::MakeTestJob(std::move(spec), 1, store_, metrics_, tenant);
  };
  auto a1 = job("alice", "a1", 60);
  ASSERT_TRUE(scheduler_->Submit(a1).ok());
  runner_.AwaitRunning(1);
  absl::Status refused = scheduler_->Submit(job("alice", "a2", 41));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "tenant \"alice\"'s queued and running jobs hold 60 of its limit "
            "of 100 enqueued prompt tokens (--tenant_max_enqueued_tokens), 40 "
            "left, and the job's prompts are about 41; wait for a job to "
            "finish, or cancel one");
  auto a2 = job("alice", "a2", 40);
  ASSERT_TRUE(scheduler_->Submit(a2).ok());  // queued: exactly the limit
  EXPECT_EQ(
      testing::MetricValue(metrics_.Serialize(),
                           R"(sdg_tenant_enqueued_tokens{tenant="alice"})"),
      100);
  auto b1 = job("bob", "b1", 100);
  ASSERT_TRUE(scheduler_->Submit(b1).ok());
  auto resumed = job("alice", "resumed", 50);
  ASSERT_TRUE(scheduler_->Submit(resumed, Scheduler::Admission::kResumed).ok());
  EXPECT_EQ(scheduler_->Submit(job("alice", "a3", 1)).code(),
            absl::StatusCode::kResourceExhausted);
  runner_.Open();
  for (const auto& ended : {a1, a2, b1, resumed}) {
    EXPECT_TRUE(ended->AwaitFinished(absl::InfiniteFuture()));
  }
  // Every share is given back.
  for (const char* tenant : {"alice", "bob"}) {
    EXPECT_EQ(testing::MetricValue(
                  metrics_.Serialize(),
                  absl::StrCat(R"(sdg_tenant_enqueued_tokens{tenant=")", tenant,
                               R"("})")),
              0)
        << tenant;
  }
  auto again = job("alice", "again", 100);
  EXPECT_TRUE(scheduler_->Submit(again).ok());
  EXPECT_TRUE(again->AwaitFinished(absl::InfiniteFuture()));
}

TEST_F(SchedulerTest, AResumedJobIsQueuedPastEveryLimit) {
  StartScheduler(/*max_workers=*/1, /*max_jobs=*/1, /*max_queued=*/0,
                 /*tenant_max_jobs=*/1, /*tenant_max_queued=*/0);
  auto running =
      TenantJob("alice", "running", 1, std::make_shared<RecordingSink>());
  ASSERT_TRUE(scheduler_->Submit(running).ok());
  EXPECT_EQ(scheduler_
                ->Submit(TenantJob("alice", "new", 1,
                                   std::make_shared<RecordingSink>()))
                .code(),
            absl::StatusCode::kResourceExhausted);
  auto resumed =
      TenantJob("alice", "resumed", 1, std::make_shared<RecordingSink>());
  ASSERT_TRUE(scheduler_->Submit(resumed, Scheduler::Admission::kResumed).ok());
  EXPECT_EQ(resumed->Snapshot().state(), v1::JOB_STATE_QUEUED);
  runner_.Open();
  EXPECT_TRUE(resumed->AwaitFinished(absl::InfiniteFuture()));
  EXPECT_EQ(resumed->Snapshot().state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SchedulerTest, AFreedRunSlotGoesToTheTenantRunningFewest) {
  StartScheduler(/*max_workers=*/1, /*max_jobs=*/2);
  SubmitTenantJob("alice", "a1", 1);
  runner_.AwaitRunning(1);
  SubmitTenantJob("alice", "a2", 1);  // the second run slot
  SubmitTenantJob("alice", "a3", 1);  // queued
  SubmitTenantJob("bob", "b1", 1);    // queued after a3
  runner_.Open();
  AwaitTenantJobsClosed();
  std::vector<std::string> started = runner_.started();
  ASSERT_EQ(started.size(), 4u);
  // When a1 ends, alice still runs a2 and bob runs nothing: b1 starts, and
  // runs, before the older a3.
  EXPECT_EQ(started[0], "a1:0");
  EXPECT_EQ(started[1], "b1:0");
  EXPECT_THAT(started, UnorderedElementsAre("a1:0", "a2:0", "a3:0", "b1:0"));
}

TEST_F(SchedulerTest, NumWorkersCapsOneJob) {
  StartScheduler(/*max_workers=*/8);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("capped", 12, 2, sink)).ok());
  runner_.AwaitRunning(2);
  runner_.Open();
  auto events = sink->AwaitClosed();
  EXPECT_EQ(runner_.max_running(), 2);
  EXPECT_EQ(Finished(events).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Finished(events).shards_succeeded(), 12);
}

TEST_F(SchedulerTest, OneWorkerRunsShardsOneAfterAnother) {
  StartScheduler(/*max_workers=*/8);
  auto sink = std::make_shared<RecordingSink>();
  runner_.Open();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("serial", 5, 1, sink)).ok());
  auto events = sink->AwaitClosed();
  EXPECT_EQ(runner_.max_running(), 1);
  EXPECT_THAT(runner_.started(), ElementsAre("serial:0", "serial:1", "serial:2",
                                             "serial:3", "serial:4"));
  // started first, one result per shard in order, finished last.
  ASSERT_EQ(events.size(), 7u);
  EXPECT_TRUE(events.front().has_started());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(events[1 + i].shard_result().shard_index(), i);
}

// A pipeline's second stage gets its shards as its rows are released from
// the first stage's barrier: none while no first-stage shard is committed,
// all three once they are, and the job ends after them.
// A pipeline of two stages (test_pipelines.h), one seed row per shard.
JobSpec TwoStagePipeline(const std::string& id, int num_workers) {
  return testing::PipelineJobSpec(testing::kRenameThenRename, id,
                                  /*batch_size=*/1, num_workers);
}

TEST_F(SchedulerTest, APipelinesNextStageRunsOnceItsBarrierIsDone) {
  StartScheduler(/*max_workers=*/4);
  auto sink = std::make_shared<RecordingSink>();
  std::shared_ptr<Job> job = testing::MakeTestJob(
      TwoStagePipeline("staged", /*num_workers=*/4), 3, store_, metrics_);
  sink->Watch(job);
  ASSERT_TRUE(scheduler_->Submit(job).ok());
  runner_.AwaitRunning(3);
  EXPECT_EQ(job->shard_count(), 3);  // the second stage is not known yet
  runner_.Open();
  std::vector<LogEvent> events = sink->AwaitClosed();
  EXPECT_EQ(job->shard_count(), 6);
  std::vector<std::string> started = runner_.started();
  ASSERT_EQ(started.size(), 6u);
  EXPECT_THAT(std::vector<std::string>(started.begin(), started.begin() + 3),
              UnorderedElementsAre("staged:0", "staged:1", "staged:2"));
  // A later stage's shards are numbered from 0 within it.
  EXPECT_THAT(std::vector<std::string>(started.begin() + 3, started.end()),
              UnorderedElementsAre("staged:1/0", "staged:1/1", "staged:1/2"));
  int stage_rows = 0;
  int result_rows = 0;
  for (const LogEvent& event : events) {
    if (event.has_stage_rows()) stage_rows += event.stage_rows().rows_size();
    if (event.has_shard_result()) {
      EXPECT_EQ(event.shard_result().stage(), 1);
      EXPECT_LT(event.shard_result().shard_index(), 3);
      result_rows += event.shard_result().rows_size();
    }
  }
  EXPECT_EQ(stage_rows, 3);
  EXPECT_EQ(result_rows, 3);
  EXPECT_EQ(Finished(events).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Finished(events).rows_succeeded(), 3);
}

// A pipeline's shard goes on to its next stage only once its events are
// committed; while the commit is slow, it holds neither a worker nor a
// place in max_workers: with one worker, another job runs to its end
// meanwhile. The wait below is bounded only so that a regression fails
// here instead of hanging.
TEST_F(SchedulerTest, APipelineShardWaitingForItsCommitHoldsNoWorker) {
  StartScheduler(/*max_workers=*/1);
  runner_.Open();
  std::shared_ptr<testing::HeldEventLog> held = store_.HoldCommitsOf("staged");
  auto staged_sink = std::make_shared<RecordingSink>();
  std::shared_ptr<Job> staged = testing::MakeTestJob(
      TwoStagePipeline("staged", /*num_workers=*/1), 1, store_, metrics_);
  staged_sink->Watch(staged);
  ASSERT_TRUE(scheduler_->Submit(staged).ok());
  // `started`, then the seed shard's stage_rows: its commit waits.
  held->AwaitHeldGroups(2);

  auto other_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("other", 2, 1, other_sink)).ok());
  absl::Notification other_finished;
  std::thread other([&] {
    other_sink->AwaitClosed();
    other_finished.Notify();
  });
  const bool other_ran =
      other_finished.WaitForNotificationWithTimeout(absl::Minutes(1));
  // The second stage has not started: its input is not committed yet.
  const std::vector<std::string> started_before_commit = runner_.started();
  held->Release();
  other.join();

  EXPECT_TRUE(other_ran) << "a worker waited for the pipeline's commit";
  EXPECT_THAT(started_before_commit,
              ElementsAre("staged:0", "other:0", "other:1"));
  const v1::JobFinished finished = Finished(staged_sink->AwaitClosed());
  EXPECT_EQ(finished.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(finished.rows_succeeded(), 1);
  EXPECT_THAT(runner_.started(),
              ElementsAre("staged:0", "other:0", "other:1", "staged:1/0"));
}

TEST_F(SchedulerTest, CancelStopsNewShardsAndKeepsTheWorkers) {
  StartScheduler(/*max_workers=*/4);
  auto sink = std::make_shared<RecordingSink>();
  auto job = MakeJob("long", 100, 2, sink);
  ASSERT_TRUE(scheduler_->Submit(job).ok());
  runner_.AwaitRunning(2);
  job->Cancel(absl::CancelledError("cancelled by CancelJob"));
  auto events = sink->AwaitClosed();
  EXPECT_EQ(runner_.started().size(), 2u);  // nothing started after the cancel
  v1::JobFinished finished = Finished(events);
  EXPECT_EQ(finished.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(finished.reason(), "cancelled by CancelJob");
  EXPECT_EQ(finished.shards_failed(), 2);  // the two it aborted

  auto next_sink = std::make_shared<RecordingSink>();
  runner_.Open();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("next", 3, 4, next_sink)).ok());
  EXPECT_EQ(Finished(next_sink->AwaitClosed()).state(),
            v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(scheduler_->worker_count(), 4);
}

TEST_F(SchedulerTest, FailFastCancelsTheRestAndNamesTheShard) {
  StartScheduler(/*max_workers=*/1);
  runner_.FailShard(1);
  runner_.Open();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(
      scheduler_->Submit(MakeJob("ff", 10, 1, sink, v1::ERROR_POLICY_FAIL_FAST))
          .ok());
  v1::JobFinished finished = Finished(sink->AwaitClosed());
  EXPECT_EQ(finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(
      finished.reason(),
      HasSubstr("shard 1 (rows 1-1) failed and error_policy is "
                "ERROR_POLICY_FAIL_FAST: backend returned HTTP 400: no"));
  EXPECT_THAT(runner_.started(), ElementsAre("ff:0", "ff:1"));
}

TEST_F(SchedulerTest, ContinuePolicyRunsEveryOtherShard) {
  StartScheduler(/*max_workers=*/1);
  runner_.FailShard(1);
  runner_.Open();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("cont", 5, 1, sink)).ok());
  v1::JobFinished finished = Finished(sink->AwaitClosed());
  EXPECT_EQ(finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(finished.shards_succeeded(), 4);
  EXPECT_EQ(finished.shards_failed(), 1);
  EXPECT_EQ(runner_.started().size(), 5u);
}

TEST_F(SchedulerTest, AdmissionQueuesThenRejects) {
  StartScheduler(/*max_workers=*/2, /*max_jobs=*/1, /*max_queued=*/1);
  auto first_sink = std::make_shared<RecordingSink>();
  auto queued_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("first", 2, 2, first_sink)).ok());
  auto queued = MakeJob("queued", 2, 2, queued_sink);
  ASSERT_TRUE(scheduler_->Submit(queued).ok());
  EXPECT_EQ(queued->Snapshot().state(), v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(queued_sink->events().empty());  // no `started` while queued

  absl::Status rejected = scheduler_->Submit(
      MakeJob("third", 1, 1, std::make_shared<RecordingSink>()));
  EXPECT_EQ(rejected.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(rejected.message(),
            "server is at its limit of 1 running and 1 queued jobs "
            "(--max_jobs, --max_queued_jobs); retry later");

  runner_.Open();
  EXPECT_EQ(Finished(first_sink->AwaitClosed()).state(),
            v1::JOB_STATE_SUCCEEDED);
  auto events = queued_sink->AwaitClosed();
  EXPECT_TRUE(events.front().has_started());
  EXPECT_EQ(Finished(events).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SchedulerTest, CancellingAQueuedJobFinishesItWithoutStarting) {
  StartScheduler(/*max_workers=*/1, /*max_jobs=*/1);
  auto running_sink = std::make_shared<RecordingSink>();
  auto queued_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(MakeJob("running", 1, 1, running_sink)).ok());
  auto queued = MakeJob("queued", 3, 1, queued_sink);
  ASSERT_TRUE(scheduler_->Submit(queued).ok());
  queued->Cancel(absl::CancelledError("cancelled by CancelJob"));
  auto events = queued_sink->AwaitClosed();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].finished().state(), v1::JOB_STATE_CANCELLED);
  runner_.Open();
  running_sink->AwaitClosed();
  EXPECT_THAT(runner_.started(), ElementsAre("running:0"));
}

TEST_F(SchedulerTest, TimeoutStopsTheJobWithDeadlineExceeded) {
  StartScheduler(2);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(
      scheduler_
          ->Submit(MakeJob("slow", 4, 2, sink, v1::ERROR_POLICY_CONTINUE,
                           absl::Milliseconds(300)))
          .ok());
  runner_.AwaitRunning(2);
  EXPECT_THAT(timers_.ArmedDelays(), ElementsAre(absl::Milliseconds(300)));

  timers_.FireAll();  // the timeout passes while two shards are held
  v1::JobFinished finished = Finished(sink->AwaitClosed());
  EXPECT_EQ(finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(finished.reason(), "the job's timeout of 300ms passed");
  EXPECT_EQ(finished.shards_failed(), 2);
  // Two workers took the first two shards, in either order; none started
  // after the timeout.
  EXPECT_THAT(runner_.started(), UnorderedElementsAre("slow:0", "slow:1"));
}

TEST_F(SchedulerTest, FinishedJobLeavesNoTimerArmed) {
  StartScheduler(2);
  runner_.Open();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_
                  ->Submit(MakeJob("quick", 2, 2, sink,
                                   v1::ERROR_POLICY_CONTINUE, absl::Hours(1)))
                  .ok());
  EXPECT_EQ(Finished(sink->AwaitClosed()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(timers_.ArmedDelays().empty());
}

// A job's record write that waits on the disk holds up neither the
// scheduler (another job is admitted, dispatched and finished meanwhile)
// nor a reader of the waiting job (GetJob, ListJobs). The waits below are
// bounded only so that a regression fails here instead of hanging.
TEST_F(SchedulerTest, ARecordWriteWaitingOnTheStoreHoldsUpNoOtherJob) {
  StartScheduler(2);
  runner_.Open();
  auto stalled_sink = std::make_shared<RecordingSink>();
  auto other_sink = std::make_shared<RecordingSink>();
  std::shared_ptr<Job> stalled = MakeJob("stalled", 2, 1, stalled_sink);
  store_.ShutFor("stalled");  // once its record is added
  std::thread submitter([&] { EXPECT_TRUE(scheduler_->Submit(stalled).ok()); });
  store_.AwaitWaiting();  // its RUNNING record is being written

  absl::Notification other_finished;
  std::thread other([&] {
    EXPECT_TRUE(scheduler_->Submit(MakeJob("other", 3, 2, other_sink)).ok());
    other_sink->AwaitClosed();
    other_finished.Notify();
  });
  absl::Notification read;
  v1::JobState read_state = v1::JOB_STATE_UNSPECIFIED;
  std::thread reader([&] {
    read_state = stalled->Snapshot().state();
    read.Notify();
  });
  const bool other_ran =
      other_finished.WaitForNotificationWithTimeout(absl::Minutes(1));
  const bool stalled_was_read =
      read.WaitForNotificationWithTimeout(absl::Minutes(1));
  store_.Open();
  submitter.join();
  other.join();
  reader.join();

  EXPECT_TRUE(other_ran) << "another job waited for the stalled write";
  EXPECT_TRUE(stalled_was_read) << "reading the job waited for its write";
  EXPECT_THAT(read_state,
              AnyOf(v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(Finished(other_sink->AwaitClosed()).state(),
            v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Finished(stalled_sink->AwaitClosed()).state(),
            v1::JOB_STATE_SUCCEEDED);
  // A job's final record is written after watchers get `finished`, on the
  // worker that ended it: once the workers are joined, every write is in.
  // The write that waited did not overwrite the final state.
  scheduler_.reset();
  EXPECT_EQ(store_.LastSavedState("stalled"), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(store_.LastSavedState("other"), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace sdg
