// Cancellation latency: a job with 256 requests hung in llmsim is cancelled
// with CancelJob; measured from the CancelJob call to the `finished` event
// on the job's stream. Prints one JSON object per run.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/time/clock.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/http_get.h"
#include "tools/llmsim/sim_server.h"

namespace sdg {
namespace {

constexpr int kHung = 256;

int InFlight(int sim_port) {
  auto stats = testing::HttpGet("http://127.0.0.1:" + std::to_string(sim_port) +
                                "/stats");
  return stats.ok() ? nlohmann::json::parse(*stats)["in_flight"].get<int>()
                    : -1;
}

}  // namespace
}  // namespace sdg

int main() {
  using namespace sdg;
  llmsim::SimServer::Options sim_options;
  sim_options.model = "m";
  sim_options.latency_ms = 600000;
  auto sim = *llmsim::SimServer::Create(sim_options);
  std::thread sim_thread([&] { sim->Run(); });

  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.scheduler.max_workers = kHung;
  BackendOptions backend;
  backend.name = "sim";
  backend.base_urls = {"http://127.0.0.1:" + std::to_string(sim->port()) +
                       "/v1"};
  backend.max_in_flight = kHung;
  options.backends.push_back(backend);
  auto server = *Server::Create(options);
  auto stub = v1::GenerationService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                          grpc::InsecureChannelCredentials()));

  for (int run = 0; run < 5; ++run) {
    v1::GenerateJobRequest request;
    request.set_job_id("cancel-" + std::to_string(run));
    request.mutable_block()->set_model("m");
    request.mutable_block()->set_prompt_template("{{q}}");
    for (int i = 0; i < kHung; ++i) {
      (*request.add_rows()->mutable_fields())["q"].set_string_value("x");
    }
    request.set_batch_size(1);
    request.set_num_workers(kHung);

    grpc::ClientContext context;
    auto reader = stub->GenerateJob(&context, request);
    while (InFlight(sim->port()) < kHung)
      absl::SleepFor(absl::Milliseconds(10));

    absl::Time cancel_at = absl::Now();
    grpc::ClientContext cancel_context;
    v1::CancelJobRequest cancel;
    cancel.set_job_id(request.job_id());
    v1::Job job;
    stub->CancelJob(&cancel_context, cancel, &job);
    v1::JobEvent event;
    absl::Time finished_at = absl::InfinitePast();
    while (reader->Read(&event)) {
      if (event.has_finished()) finished_at = absl::Now();
    }
    reader->Finish();
    std::printf(
        "{\"bench\":\"cancel\",\"hung_requests\":%d,\"cancel_to_finished_ms\":%"
        ".2f,\"state\":\"%s\"}\n",
        kHung, absl::ToDoubleMilliseconds(finished_at - cancel_at),
        v1::JobState_Name(event.finished().state()).c_str());
    while (InFlight(sim->port()) != 0) absl::SleepFor(absl::Milliseconds(10));
  }
  server.reset();
  sim->Stop();
  sim_thread.join();
  return 0;
}
