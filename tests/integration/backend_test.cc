// The backend client against llmsim's imitations of vLLM and llama.cpp and
// its faults: every fault type ends as a user expects, caps hold, batching
// follows what the server says it is, and a pool survives a dead endpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

llmsim::SimServer::Options Faults(double llmsim::SimServer::Options::*rate,
                                  double value) {
  llmsim::SimServer::Options options;
  options.*rate = value;
  options.fault_seed = 7;
  return options;
}

class BackendTest : public ServiceFixture {
 protected:
  // Every row and sample in input order.
  static void ExpectAllRows(const Events& events, int rows) {
    EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED)
        << events.Finished().reason();
    EXPECT_EQ(events.Rows().size(), static_cast<size_t>(rows));
    EXPECT_THAT(events.Errors(), ::testing::IsEmpty());
  }

  static v1::GenerateJobRequest ChatRequest(int rows) {
    v1::GenerateJobRequest request = Request(rows);
    request.mutable_block()->set_api(v1::API_CHAT);
    return request;
  }
};

TEST_F(BackendTest, ServiceUnavailableAtThirtyPercentIsRetriedAway) {
  llmsim::SimServer::Options options =
      Faults(&llmsim::SimServer::Options::fail_rate, 0.3);
  options.fail_code = 503;
  SimThread sim(options);
  // Enough attempts that 30 % failures cannot exhaust them in this run.
  backend_defaults_.retry.max_attempts = 8;
  StartServer({{"sim", sim.url()}});

  ExpectAllRows(Run(Request(100)), 100);
  nlohmann::json stats = sim.Stats();
  ASSERT_GT(stats["by_status"].value("503", 0), 0) << stats.dump();
  EXPECT_EQ(stats["by_status"].value("200", 0), 100);
  EXPECT_EQ(Metric(R"(sdg_backend_retries_total{backend="sim",reason="503"})"),
            stats["by_status"].value("503", 0));
}

TEST_F(BackendTest, ResetConnectionsAtThirtyPercentAreRetriedAway) {
  SimThread sim(Faults(&llmsim::SimServer::Options::reset_rate, 0.3));
  backend_defaults_.retry.max_attempts = 8;
  StartServer({{"sim", sim.url()}});

  ExpectAllRows(Run(Request(100)), 100);
  nlohmann::json stats = sim.Stats();
  ASSERT_GT(stats["resets"], 0) << stats.dump();
  EXPECT_EQ(
      Metric(
          R"(sdg_backend_retries_total{backend="sim",reason="connect_error"})"),
      stats["resets"]);
}

TEST_F(BackendTest, RetryAfterIsHonoured) {
  llmsim::SimServer::Options options;
  options.fail_rate = 1;
  options.fail_code = 429;
  options.retry_after_s = 2;
  SimThread sim(options);
  backend_defaults_.retry.max_attempts = 2;
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Request(1);

  Events events = Run(request);
  ASSERT_EQ(events.Errors().size(), 1u);
  EXPECT_EQ(events.Errors()[0].attempts(), 2);
  EXPECT_THAT(events.Errors()[0].message(), HasSubstr("simulated failure"));
  EXPECT_EQ(events.Errors()[0].code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::vector<int64_t> arrivals = sim.Stats()["arrivals_ms"];
  ASSERT_EQ(arrivals.size(), 2u);
  // The retry came no sooner than Retry-After said (a lower bound only).
  EXPECT_GE(arrivals[1] - arrivals[0], 2000);
}

TEST_F(BackendTest, HungRequestTimesOutAndIsRetried) {
  SimThread sim(Faults(&llmsim::SimServer::Options::hang_rate, 0.3));
  backend_defaults_.retry.max_attempts = 8;
  ServerOptions options;
  options.http.request_timeout = absl::Milliseconds(300);
  StartServer({{"sim", sim.url()}}, options);

  ExpectAllRows(Run(Request(30)), 30);
  nlohmann::json stats = sim.Stats();
  ASSERT_GT(stats["hung"], 0) << stats.dump();
  EXPECT_EQ(
      Metric(R"(sdg_backend_retries_total{backend="sim",reason="timeout"})"),
      stats["hung"]);
  EXPECT_TRUE(Eventually([&] {
    return sim.Stats()["closed_by_client"] == stats["hung"];
  })) << sim.Stats().dump();
}

TEST_F(BackendTest, MalformedReplyFailsTheShardSayingSo) {
  SimThread sim(Faults(&llmsim::SimServer::Options::malformed_rate, 1));
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Request(1);

  Events events = Run(request);
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(events.Errors().size(), 1u);
  EXPECT_THAT(events.Errors()[0].message(),
              HasSubstr("backend reply was not valid JSON"));
  EXPECT_EQ(sim.Stats()["requests"], 1);
}

TEST_F(BackendTest, SlowBodiesStillArriveWhole) {
  llmsim::SimServer::Options options =
      Faults(&llmsim::SimServer::Options::slow_body_rate, 1);
  options.slow_body_ms = 200;
  SimThread sim(options);
  StartServer({{"sim", sim.url()}});

  Events events = Run(Request(6));
  ExpectAllRows(events, 6);
  EXPECT_EQ(events.Rows()[5].columns().fields().at("output").string_value(),
            "sim(0): Q5: why 5");
  EXPECT_EQ(sim.Stats()["slow_bodies"], 6);
}

TEST_F(BackendTest, BadRequestIsNotRetried) {
  llmsim::SimServer::Options options;
  options.fail_rate = 1;
  options.fail_code = 400;
  SimThread sim(options);
  StartServer({{"sim", sim.url()}});

  Events events = Run(Request(3));
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(events.Errors().size(), 1u);  // one shard of 3 rows
  EXPECT_EQ(events.Errors()[0].attempts(), 1);
  EXPECT_EQ(events.Errors()[0].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(events.Errors()[0].message(), HasSubstr("simulated failure"));
  EXPECT_EQ(sim.Stats()["requests"], 3);
  // Every retry series is there from the start, and each is still zero.
  EXPECT_THAT(
      server_->metrics().Serialize(),
      AllOf(HasSubstr("sdg_backend_retries_total{"),
            Not(ContainsRegex(R"(sdg_backend_retries_total\{[^}]*\} [1-9])"))));
}

TEST_F(BackendTest, InFlightCapHoldsWhateverTheWorkerCount) {
  SimThread sim(WithLatency(absl::Milliseconds(100)));
  backend_defaults_.in_flight_mode = InFlightMode::kFixed;
  backend_defaults_.max_in_flight = 16;
  ServerOptions options;
  options.scheduler.max_workers = 64;
  StartServer({{"sim", sim.url()}}, options);
  v1::GenerateJobRequest request = ChatRequest(300);
  request.set_num_workers(64);
  request.set_batch_size(8);  // 512 requests want to go at once

  ExpectAllRows(Run(request), 300);
  EXPECT_EQ(sim.Stats()["max_in_flight"], 16);
  EXPECT_EQ(Metric(R"(sdg_backend_concurrency_limit{backend="sim"})"), 16);
}

TEST_F(BackendTest, SingleSlotLlamaCppThatAnswersBusyWith503Succeeds) {
  llmsim::SimServer::Options options = WithLatency(absl::Milliseconds(5));
  options.mode = llmsim::Mode::kLlamaCpp;
  options.slots = 1;
  options.busy_status = 503;
  SimThread sim(options);
  backend_defaults_.batching = BatchingMode::kAuto;  // the defaults of sdgd
  backend_defaults_.in_flight_mode = InFlightMode::kAuto;
  backend_defaults_.retry.max_attempts = 1;  // any 503 would fail the job
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Request(40);
  request.set_num_workers(32);
  request.set_batch_size(4);

  ExpectAllRows(Run(request), 40);
  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["max_in_flight"], 1);
  EXPECT_EQ(stats["by_status"].value("503", 0), 0);
  EXPECT_EQ(stats["requests"], 40);  // one prompt per request
  EXPECT_EQ(Metric(R"(sdg_backend_concurrency_limit{backend="sim"})"), 1);
}

TEST_F(BackendTest, VllmGetsOneRequestPerShardAndChatOnePerRow) {
  SimThread sim;
  backend_defaults_.batching = BatchingMode::kAuto;
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Request(20);
  request.set_batch_size(8);  // shards of 8, 8 and 4
  request.mutable_block()->set_n(2);

  Events events = Run(request);
  ExpectAllRows(events, 40);
  EXPECT_EQ(events.Rows()[39].columns().fields().at("output").string_value(),
            "sim(1): Q19: why 19");
  EXPECT_EQ(sim.Stats()["requests"], 3);
  EXPECT_EQ(sim.Stats()["prompts"], 20);

  request.mutable_block()->set_api(v1::API_CHAT);
  ExpectAllRows(Run(request), 40);
  EXPECT_EQ(sim.Stats()["requests"], 3 + 20);
}

TEST_F(BackendTest, ExplicitSettingsAskTheServerNothing) {
  SimThread sim;
  backend_defaults_.batching = BatchingMode::kOff;
  backend_defaults_.in_flight_mode = InFlightMode::kFixed;
  StartServer({{"sim", sim.url()}});
  ExpectAllRows(Run(Request(6)), 6);
  EXPECT_EQ(sim.Stats()["discovery_requests"], 0);
}

TEST_F(BackendTest, AutoSettingsAskTheServerOnce) {
  SimThread sim;
  backend_defaults_.batching = BatchingMode::kAuto;
  StartServer({{"sim", sim.url()}});
  ExpectAllRows(Run(Request(6)), 6);
  ExpectAllRows(Run(Request(6)), 6);
  EXPECT_EQ(sim.Stats()["discovery_requests"], 2);  // /v1/models and /props
}

TEST_F(BackendTest, BatchingForcedOffSendsOneRequestPerRow) {
  SimThread sim;
  backend_defaults_.batching = BatchingMode::kOff;
  StartServer({{"sim", sim.url()}});
  v1::GenerateJobRequest request = Request(20);
  request.set_batch_size(8);

  ExpectAllRows(Run(request), 20);
  EXPECT_EQ(sim.Stats()["requests"], 20);
}

TEST_F(BackendTest, PoolWithADeadEndpointServesThroughTheLiveOne) {
  SimThread sim;
  backend_defaults_.pool.eject_after_failures = 2;
  StartServer({{"sim", sim.url() + ",http://127.0.0.1:1/v1"}});

  ExpectAllRows(Run(Request(100)), 100);
  EXPECT_EQ(sim.Stats()["by_status"].value("200", 0), 100);
  EXPECT_EQ(Metric(R"(sdg_backend_endpoints{backend="sim"})"), 2);
  EXPECT_EQ(Metric(R"(sdg_backend_endpoints_ejected{backend="sim"})"), 1);
}

TEST_F(BackendTest, EjectedEndpointComesBackAfterItsCooldown) {
  SimThread live;
  // A port with nothing behind it yet; llmsim starts there later.
  llmsim::SimServer::Options late_options;
  late_options.listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  backend_defaults_.pool.eject_after_failures = 1;
  backend_defaults_.pool.eject_cooldown = absl::Milliseconds(200);
  StartServer({{"sim", live.url() + ",http://" + late_options.listen + "/v1"}});
  ExpectAllRows(Run(Request(30)), 30);
  ASSERT_EQ(Metric(R"(sdg_backend_endpoints_ejected{backend="sim"})"), 1);

  SimThread late(late_options);
  // Jobs keep coming; once the cool-down is over a trial request finds the
  // endpoint alive and it takes its share again.
  EXPECT_TRUE(Eventually([&] {
    ExpectAllRows(Run(Request(30)), 30);
    return Metric(R"(sdg_backend_endpoints_ejected{backend="sim"})") == 0 &&
           late.Stats()["requests"] > 1;
  }));
}

TEST_F(BackendTest, PoolWithEveryEndpointDownFailsNamingThem) {
  backend_defaults_.pool.eject_after_failures = 1;
  backend_defaults_.outage.limit = absl::ZeroDuration();
  StartServer({{"dead", "http://127.0.0.1:1/v1,http://127.0.0.1:2/v1"}});
  v1::GenerateJobRequest request = Request(30);
  request.set_num_workers(1);

  Events events = Run(request);
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(events.Errors().size(), 10u);
  for (const v1::ShardError& error : events.Errors()) {
    EXPECT_EQ(error.code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_THAT(events.Errors().back().message(),
              AllOf(HasSubstr("every endpoint of backend \"dead\" is failing"),
                    HasSubstr("http://127.0.0.1:1/v1"),
                    HasSubstr("http://127.0.0.1:2/v1")));
}

TEST_F(BackendTest, CallsWaitOutAnOutageThenFailAtItsLimitNamingTheEndpoints) {
  backend_defaults_.outage.limit = absl::Milliseconds(300);
  backend_defaults_.outage.failures = 2;
  StartServer({{"dead", "http://127.0.0.1:1/v1,http://127.0.0.1:2/v1"}});
  v1::GenerateJobRequest request = Request(6);

  Events events = Run(request);
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(events.Finished().rows_failed(), 6);
  ASSERT_FALSE(events.Errors().empty());
  for (const v1::ShardError& error : events.Errors()) {
    EXPECT_EQ(error.code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(error.message(),
                AllOf(HasSubstr("backend \"dead\" has been down for"),
                      HasSubstr("past --backend_outage_limit (300ms)"),
                      HasSubstr("http://127.0.0.1:1/v1 ("),
                      HasSubstr("http://127.0.0.1:2/v1 (")));
    // Waiting spent none of the call's attempts.
    EXPECT_LT(error.attempts(), 3);
  }
  EXPECT_EQ(Metric(R"(sdg_backend_up{backend="dead"})"), 0);
}

TEST_F(BackendTest, AJobWaitingForADownBackendSaysSo) {
  backend_defaults_.outage.failures = 2;  // limit: the default 10 minutes
  StartServer({{"dead", "http://127.0.0.1:1/v1"}});
  v1::GenerateJobRequest request = Request(6);
  request.set_job_id("waiting");
  auto call = RunInBackground(request);
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<v1::Job> job = GetJob("waiting");
    return job.ok() && job->backend_down();
  }));
  EXPECT_EQ(Metric(R"(sdg_backend_up{backend="dead"})"), 0);
  EXPECT_EQ(GetJob("waiting")->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(GetJob("waiting")->rows_failed(), 0) << "waiting, not failing";
  ASSERT_TRUE(CancelJob("waiting").ok());
  Events events = call->Wait();
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(BackendTest, APasswordInTheBackendUrlIsNeverReported) {
  backend_defaults_.outage.limit = absl::ZeroDuration();
  backend_defaults_.retry.max_attempts = 1;
  StartServer({{"dead", "http://user:s3cret-pw@127.0.0.1:1/v1"}});
  Events events = Run(Request(3));
  ASSERT_FALSE(events.Errors().empty());
  for (const v1::ShardError& error : events.Errors()) {
    EXPECT_THAT(error.message(), HasSubstr("user:[redacted]@127.0.0.1:1"));
    EXPECT_THAT(error.message(), Not(HasSubstr("s3cret-pw")));
  }
  EXPECT_THAT(server_->metrics().Serialize(), Not(HasSubstr("s3cret-pw")));
}

TEST_F(BackendTest, ApiKeyIsSentAndNeverReported) {
  const std::string key = "sk-test-0123456789abcdef";
  llmsim::SimServer::Options options;
  options.api_key = key;
  SimThread sim(options);
  backend_defaults_.api_key = ApiKey(key);
  StartServer({{"sim", sim.url()}});
  ExpectAllRows(Run(Request(3)), 3);

  // A wrong key: llmsim, as OpenAI does, quotes it in its 401 message.
  const std::string wrong = "sk-wrong-fedcba9876543210";
  server_.reset();
  backend_defaults_.api_key = ApiKey(wrong);
  StartServer({{"sim", sim.url()}});
  Events events = Run(Request(3));
  ASSERT_EQ(events.Errors().size(), 1u);
  EXPECT_EQ(events.Errors()[0].code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(events.Errors()[0].message(),
              HasSubstr("Incorrect API key provided: [redacted API key]"));
  for (const v1::JobEvent& event : events.all) {
    EXPECT_THAT(event.DebugString(),
                AllOf(Not(HasSubstr(wrong)), Not(HasSubstr(key))));
  }
  EXPECT_THAT(server_->metrics().Serialize(),
              AllOf(Not(HasSubstr(wrong)), Not(HasSubstr("sk-"))));
}

}  // namespace
}  // namespace sdg::testing
