// Every way a job can be stopped, against llmsim servers whose requests hang
// (latency far beyond the test's patience): the job ends in the right state
// with the right reason, llmsim sees its connections closed, and the same
// workers serve the next job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

using ::testing::HasSubstr;

class CancellationTest : public ServiceFixture {
 protected:
  void SetUp() override {
    StartServer({{"sim", fast_.url()}, {"slow", slow_.url()}});
    ASSERT_EQ(ThreadCount("sdg-worker"), 8);
    ASSERT_EQ(ThreadCount("sdg-loop"), 1);
  }

  // 8 rows in shards of 2, 4 at once: 8 requests hang in llmsim.
  v1::GenerateJobRequest HangingJob(const std::string& id) {
    v1::GenerateJobRequest request = Request(8, "slow");
    request.set_job_id(id);
    request.set_batch_size(2);
    return request;
  }

  void AwaitHung(const SimThread& sim, int requests) {
    ASSERT_TRUE(Eventually([&] {
      return sim.Stats()["in_flight"] == requests;
    })) << sim.Stats().dump();
  }

  // What every cancellation leaves behind: `aborted` requests closed by sdgd
  // while llmsim held them (kEveryRequest: every request llmsim received,
  // for stops that come on a clock and so may beat some requests out).
  static constexpr int kEveryRequest = -1;
  void ExpectCleanAfterCancel(const SimThread& sim, int aborted,
                              const std::string& backend = "slow") {
    EXPECT_TRUE(Eventually([&] {
      nlohmann::json stats = sim.Stats();
      return stats["closed_by_client"] == (aborted == kEveryRequest
                                               ? stats["requests"].get<int>()
                                               : aborted);
    })) << sim.Stats().dump();
    EXPECT_EQ(sim.Stats()["in_flight"], 0);
    Events next = Run(Request(6));
    EXPECT_EQ(next.Finished().state(), v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(ThreadCount("sdg-worker"), 8);
    EXPECT_EQ(ThreadCount("sdg-loop"), 1);
    EXPECT_EQ(Metric("sdg_workers_busy"), 0);
    EXPECT_EQ(Metric("sdg_backend_in_flight{backend=\"" + backend + "\"}"), 0);
  }

  SimThread fast_;
  SimThread slow_{WithLatency(absl::Minutes(10))};  // hangs, for the test
};

TEST_F(CancellationTest, CancelJobRpcAbortsInFlightRequests) {
  auto call = RunInBackground(HangingJob("rpc"));
  AwaitHung(slow_, 8);

  ASSERT_TRUE(CancelJob("rpc").ok());
  Events events = call->Wait();

  EXPECT_TRUE(events.status.ok()) << events.status.error_message();
  v1::JobFinished finished = events.Finished();
  EXPECT_EQ(finished.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(finished.reason(), "cancelled by CancelJob");
  EXPECT_EQ(finished.shards_failed(), 4);
  for (const v1::ShardError& error : events.Errors()) {
    EXPECT_EQ(error.code(), static_cast<int>(grpc::StatusCode::CANCELLED));
  }
  EXPECT_EQ(GetJob("rpc")->state(), v1::JOB_STATE_CANCELLED);
  ExpectCleanAfterCancel(slow_, 8);
}

TEST_F(CancellationTest, ClientCancelCancelsTheJob) {
  auto call = RunInBackground(HangingJob("client"));
  AwaitHung(slow_, 8);
  call->context().TryCancel();
  Events events = call->Wait();

  EXPECT_EQ(events.status.error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(Eventually(
      [&] { return GetJob("client")->state() == v1::JOB_STATE_CANCELLED; }));
  EXPECT_EQ(GetJob("client")->reason(),
            "the client cancelled the GenerateJob call");
  ExpectCleanAfterCancel(slow_, 8);
}

// The timeout runs on a clock, so on a loaded machine it may pass before
// every shard has sent its request: the test counts what llmsim received.
TEST_F(CancellationTest, JobTimeoutFailsTheJob) {
  v1::GenerateJobRequest request = HangingJob("timeout");
  request.mutable_timeout()->set_nanos(300'000'000);
  Events events = Run(request);
  v1::JobFinished finished = events.Finished();
  EXPECT_EQ(finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(finished.reason(), "the job's timeout of 300ms passed");
  ExpectCleanAfterCancel(slow_, kEveryRequest);
}

// Likewise the deadline: under load it can pass before the requests go out
// (or before the job is admitted, in which case sdgd still creates the job
// and fails it at once).
TEST_F(CancellationTest, CallDeadlineFailsTheJob) {
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  Events events = Run(HangingJob("deadline"), &context);
  EXPECT_EQ(events.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<v1::Job> job = GetJob("deadline");
    return job.ok() && job->state() != v1::JOB_STATE_RUNNING &&
           job->state() != v1::JOB_STATE_QUEUED;
  }));
  EXPECT_EQ(GetJob("deadline")->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(GetJob("deadline")->reason(),
            "the GenerateJob call's deadline passed");
  ExpectCleanAfterCancel(slow_, kEveryRequest);
}

TEST_F(CancellationTest, FailFastAbortsTheOtherShards) {
  // Four shards at once: three requests hang, the fourth fails with 400.
  llmsim::SimServer::Options faults;
  faults.fault_script = "hang,hang,hang,400";
  SimThread faulty(faults);
  server_.reset();
  StartServer({{"sim", fast_.url()}, {"faulty", faulty.url()}});

  v1::GenerateJobRequest request = Request(8, "faulty");
  request.set_batch_size(1);
  request.set_error_policy(v1::ERROR_POLICY_FAIL_FAST);
  Events events = Run(request);
  v1::JobFinished finished = events.Finished();
  EXPECT_EQ(finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(finished.reason(),
              HasSubstr("failed and error_policy is ERROR_POLICY_FAIL_FAST: "
                        "backend returned HTTP 400: simulated failure"));
  EXPECT_EQ(faulty.Stats()["requests"],
            4);  // no shard started after the failure
  ExpectCleanAfterCancel(faulty, 3, "faulty");
}

TEST_F(CancellationTest, ShutdownCancelsRunningJobsAndSendsFinished) {
  ServerOptions options;
  options.on_shutdown = ServerOptions::OnShutdown::kCancel;
  RestartServer({{"sim", fast_.url()}, {"slow", slow_.url()}}, options);
  auto call = RunInBackground(HangingJob("shutdown"));
  AwaitHung(slow_, 8);
  server_->Shutdown(absl::Milliseconds(100));
  Events events = call->Wait();
  EXPECT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(events.Finished().reason(),
            "server is shutting down (grace period ended)");
  EXPECT_TRUE(
      Eventually([&] { return slow_.Stats()["closed_by_client"] == 8; }));
}

TEST_F(CancellationTest,
       ShutdownSuspendsRunningJobsAndTheNextServerResumesThem) {
  // Every request hangs, so only `started` is committed; after the restart
  // every shard runs again, on a backend that answers.
  auto call = RunInBackground(HangingJob("suspended"));
  AwaitHung(slow_, 8);
  server_->Shutdown(absl::Milliseconds(100));
  Events cut = call->Wait();
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(cut.status.error_message(),
              HasSubstr("watch it again with the last sequence"));
  EXPECT_TRUE(cut.all.back().has_started()) << "no shard was committed";
  EXPECT_TRUE(
      Eventually([&] { return slow_.Stats()["closed_by_client"] == 8; }));

  // The next server maps the job's backend to one that answers.
  RestartServer({{"sim", fast_.url()}, {"slow", fast_.url()}});
  EXPECT_EQ(server_->resumed_jobs(), 1);
  EXPECT_EQ(Metric("sdg_jobs_resumed_total"), 1);
  grpc::ClientContext context;
  v1::WatchJobRequest watch;
  watch.set_job_id("suspended");
  watch.set_after_sequence(cut.all.back().sequence());
  auto reader = stub_->WatchJob(&context, watch);
  Events rest;
  v1::JobEvent event;
  while (reader->Read(&event)) rest.all.push_back(event);
  rest.status = reader->Finish();
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  EXPECT_EQ(rest.all.front().sequence(), cut.all.back().sequence() + 1);
  EXPECT_EQ(rest.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(rest.Finished().rows_succeeded(), 8);
  EXPECT_EQ(rest.Rows().size(), 8u);
  absl::StatusOr<v1::Job> job = GetJob("suspended");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->resumed(), 1);
}

TEST_F(CancellationTest, FullServerAnswersResourceExhausted) {
  server_.reset();
  ServerOptions options;
  options.scheduler.max_jobs = 1;
  options.scheduler.max_queued_jobs = 1;
  StartServer({{"sim", fast_.url()}, {"slow", slow_.url()}}, options);

  auto running = RunInBackground(HangingJob("running"));
  AwaitHung(slow_, 8);
  auto queued = RunInBackground(HangingJob("queued"));
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<v1::Job> job = GetJob("queued");
    return job.ok() && job->state() == v1::JOB_STATE_QUEUED;
  }));

  Events refused = Run(Request(2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.status.error_message(),
            "server is at its limit of 1 running and 1 queued jobs "
            "(--max_jobs, --max_queued_jobs); retry later");

  for (const char* id : {"queued", "running"}) {
    ASSERT_TRUE(CancelJob(id).ok());
  }
  Events running_events = running->Wait();
  Events queued_events = queued->Wait();
  EXPECT_EQ(running_events.Finished().state(), v1::JOB_STATE_CANCELLED);
  // Cancelled while queued: `finished` without `started`.
  ASSERT_EQ(queued_events.all.size(), 1u);
  EXPECT_EQ(queued_events.Finished().state(), v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace sdg::testing
