// sdgd against llmsim's llama.cpp, with the quirks of llama-server that a
// user running sdgd in front of a laptop model meets: n != 1 refused with
// HTTP 500, one model named by its file path, 503 while the model loads, a
// server that starts after sdgd, and few HTTP threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

using ::testing::HasSubstr;

llmsim::SimServer::Options LlamaCpp(int slots) {
  llmsim::SimServer::Options options;
  options.mode = llmsim::Mode::kLlamaCpp;
  options.slots = slots;
  options.latency_ms = 2;
  return options;
}

std::string Output(const v1::ResultRow& row) {
  return row.columns().fields().at("output").string_value();
}

class LlamaCppTest : public ServiceFixture {
 protected:
  LlamaCppTest() {
    // sdgd's own defaults: what the server is, is asked of it.
    backend_defaults_.batching = BatchingMode::kAuto;
    backend_defaults_.in_flight_mode = InFlightMode::kAuto;
  }

  // Every row has its three samples, the s-th from seed 40 + s.
  static void ExpectSeededSamples(const Events& events, int rows) {
    ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED)
        << events.Finished().reason();
    std::vector<v1::ResultRow> results = events.Rows();
    ASSERT_EQ(results.size(), static_cast<size_t>(rows * 3));
    for (int r = 0; r < rows; ++r) {
      for (int s = 0; s < 3; ++s) {
        const v1::ResultRow& row = results[r * 3 + s];
        EXPECT_EQ(row.row_index(), r);
        EXPECT_EQ(row.sample_index(), s);
        EXPECT_EQ(Output(row), "sim(seed " + std::to_string(40 + s) + "): Q" +
                                   std::to_string(r) + ": why " +
                                   std::to_string(r));
      }
    }
  }

  static v1::GenerateJobRequest ThreeSeededSamples(int rows) {
    v1::GenerateJobRequest request = Request(rows);
    request.mutable_block()->set_n(3);
    request.mutable_block()->set_seed(40);
    return request;
  }
};

// The quirk: llama.cpp refuses any n other than 1 (HTTP 500, "Only one
// completion choice is allowed"), for completions and chat alike.
TEST_F(LlamaCppTest, SamplesGoAsOneRequestEachInSampleOrder) {
  SimThread sim(LlamaCpp(2));
  StartServer({{"llama", sim.url()}});

  ExpectSeededSamples(Run(ThreeSeededSamples(10)), 10);
  v1::GenerateJobRequest chat = ThreeSeededSamples(10);
  chat.mutable_block()->set_api(v1::API_CHAT);
  ExpectSeededSamples(Run(chat), 10);

  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["requests"], 2 * 10 * 3);  // one choice each
  EXPECT_EQ(stats["by_status"].value("500", 0), 0) << stats.dump();
  EXPECT_EQ(stats["max_in_flight"], 2);  // the samples share the slot cap
  EXPECT_EQ(Metric(R"(sdg_rows_total{outcome="succeeded"})"), 20);
}

TEST_F(LlamaCppTest, UnseededSamplesDifferAsTheServerDrawsTheirSeeds) {
  SimThread sim(LlamaCpp(1));
  StartServer({{"llama", sim.url()}});
  v1::GenerateJobRequest request = Request(2);
  request.mutable_block()->set_n(3);

  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<v1::ResultRow> rows = events.Rows();
  ASSERT_EQ(rows.size(), 6u);
  std::set<std::string> outputs;
  for (const v1::ResultRow& row : rows) {
    EXPECT_THAT(Output(row), HasSubstr("sim(unseeded "));
    outputs.insert(Output(row));
  }
  EXPECT_EQ(outputs.size(), 6u);
}

// A server sdgd was told nothing about (explicit settings, no detection)
// that answers llama.cpp's refusal: sdgd learns it from the first refusal
// and sends samples one at a time from then on, failing no row.
TEST_F(LlamaCppTest, AServerThatRefusesSeveralChoicesIsLearnedFromItsAnswer) {
  SimThread sim(LlamaCpp(1));
  backend_defaults_.batching = BatchingMode::kOff;
  backend_defaults_.in_flight_mode = InFlightMode::kFixed;
  backend_defaults_.max_in_flight = 1;
  backend_defaults_.retry.max_attempts = 1;  // a 500 retried would show
  StartServer({{"llama", sim.url()}});
  v1::GenerateJobRequest request = ThreeSeededSamples(6);
  request.set_num_workers(1);

  ExpectSeededSamples(Run(request), 6);
  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["discovery_requests"], 0);
  EXPECT_EQ(stats["by_status"].value("500", 0), 1) << stats.dump();
  EXPECT_EQ(stats["requests"], 1 + 6 * 3);
}

TEST_F(LlamaCppTest, AJobWithNoModelRunsOnTheServersOneModel) {
  llmsim::SimServer::Options options = LlamaCpp(1);
  options.model = "/models/granite-7b-lab-Q4_K_M.gguf";
  SimThread sim(options);
  StartServer({{"llama", sim.url()}});
  ASSERT_TRUE(Eventually([&] {
    return Metric(R"(sdg_backend_concurrency_limit{backend="llama"})") == 1;
  }));
  v1::GenerateJobRequest request = Request(3);
  request.mutable_block()->clear_model();
  request.set_job_id("no-model");

  Events events = Run(request);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED)
      << events.status.error_message() << events.Finished().reason();
  EXPECT_EQ(events.Rows().size(), 3u);
}

// On Kubernetes and in compose sdgd and the model server start together:
// nothing is sent before the server has said what it is, so it never sees
// more requests, nor more connections, than its slots.
TEST_F(LlamaCppTest, AServerStartedAfterSdgdIsNeverSentMoreThanItsSlots) {
  const int port = FreeLoopbackPort();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
  ServerOptions server_options;
  server_options.scheduler.max_workers = 16;
  StartServer({{"llama", url}}, server_options);
  // The first detection found nothing: the backend is down.
  ASSERT_TRUE(Eventually(
      [&] { return Metric(R"(sdg_backend_up{backend="llama"})") == 0; }));
  v1::GenerateJobRequest request = Request(40);
  request.set_batch_size(4);
  request.set_num_workers(10);  // 40 requests want to go at once
  auto call = RunInBackground(request);
  auto second = RunInBackground(request);

  llmsim::SimServer::Options options = LlamaCpp(2);
  options.listen = "127.0.0.1:" + std::to_string(port);
  SimThread sim(options);
  Events first_events = call->Wait();
  Events second_events = second->Wait();
  EXPECT_EQ(first_events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(second_events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(first_events.Rows().size() + second_events.Rows().size(), 80u);

  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["requests"], 80);
  EXPECT_EQ(stats["max_in_flight"], 2) << stats.dump();
  EXPECT_LE(stats["max_connections_open"], 2) << stats.dump();
  EXPECT_EQ(stats["max_waiting_for_thread"], 0) << stats.dump();
  EXPECT_EQ(Metric(R"(sdg_backend_concurrency_limit{backend="llama"})"), 2);
  EXPECT_EQ(Metric(R"(sdg_backend_up{backend="llama"})"), 1);
}

// llama-server answers 503 "Loading model" to everything while it loads:
// detection asks again soon, and no generation request goes out meanwhile.
TEST_F(LlamaCppTest, AServerLoadingItsModelIsDetectedOnceItIsUp) {
  llmsim::SimServer::Options options = LlamaCpp(3);
  options.loading_ms = 600'000;  // until EndLoading
  SimThread sim(options);
  StartServer({{"llama", sim.url()}});
  // Detection was answered 503: the backend is down, its calls wait.
  ASSERT_TRUE(Eventually(
      [&] { return Metric(R"(sdg_backend_up{backend="llama"})") == 0; }));
  auto call = RunInBackground(Request(9));
  sim.server().EndLoading();

  Events events = call->Wait();
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED)
      << events.Finished().reason();
  EXPECT_EQ(events.Rows().size(), 9u);
  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["requests"], 9);
  EXPECT_EQ(stats["by_status"].value("503", 0), 0) << stats.dump();
  EXPECT_EQ(stats["max_in_flight"], 3);
  EXPECT_EQ(Metric(R"(sdg_backend_concurrency_limit{backend="llama"})"), 3);
  EXPECT_EQ(Metric(R"(sdg_backend_up{backend="llama"})"), 1);
}

// A backend that never answers detection: its calls wait, then fail at the
// outage limit naming what detection saw, without one request sent.
TEST_F(LlamaCppTest, CallsWaitingForDetectionFailAtTheOutageLimit) {
  llmsim::SimServer::Options options = LlamaCpp(1);
  options.loading_ms = 600'000;  // loads for longer than the test
  SimThread sim(options);
  backend_defaults_.outage.limit = absl::Milliseconds(300);
  StartServer({{"llama", sim.url()}});

  Events events = Run(Request(4));
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(events.Finished().rows_failed(), 4);
  ASSERT_FALSE(events.Errors().empty());
  EXPECT_EQ(events.Errors()[0].code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(events.Errors()[0].message(),
              HasSubstr("no endpoint answered detection (GET /v1/models): " +
                        sim.url() +
                        " (HTTP 503 from /v1/models: Loading model (the "
                        "server is not ready))"));
  EXPECT_EQ(sim.Stats()["requests"], 0);
}

}  // namespace
}  // namespace sdg::testing
