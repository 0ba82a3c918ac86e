// SIGTERM as Kubernetes sends it, to sdgd running as a process, with sdgctl
// streaming a job: what the client sees and how the server exits.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_get.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

class ShutdownTest : public StackTest {
 protected:
  void Start(std::vector<std::string> llmsim_args,
             std::vector<std::string> sdgd_args) {
    StackOptions options;
    options.llmsim_args = std::move(llmsim_args);
    options.sdgd_args = std::move(sdgd_args);
    StackTest::Start(options);
    if (stack_ == nullptr) return;
    std::string text;
    for (int i = 0; i < 4; ++i)
      text += json{{"q", "question " + std::to_string(i)}}.dump() + "\n";
    WriteFile(Input(), text);
  }

  std::string Input() const { return stack_->dir() + "/in.jsonl"; }

  // Starts `sdgctl generate` on the 4-row input and waits until llmsim holds
  // its requests.
  std::unique_ptr<Subprocess> StartJob(const std::string& name) {
    auto client = stack_->StartSdgctl(
        {"generate", "--input=" + Input(),
         "--output=" + stack_->dir() + "/" + name + ".jsonl", "--model=m",
         "--template={{q}}", "--batch_size=1"},
        stack_->dir() + "/" + name + ".stderr");
    EXPECT_TRUE(client.ok()) << client.status();
    EXPECT_TRUE(Eventually([&] {
      return json::parse(stack_->LlmsimStats())["in_flight"].get<int>() >= 1;
    }));
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::string Stderr(const std::string& name) const {
    return ReadFile(stack_->dir() + "/" + name + ".stderr");
  }

  // The status of `service` ("": the server; "liveness").
  grpc::health::v1::HealthCheckResponse::ServingStatus Health(
      const std::string& service = "") {
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        stack_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    if (!stub->Check(&context, request, &response).ok()) {
      return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    }
    return response.status();
  }
};

TEST_F(ShutdownTest, ShortGraceCancelsTheRunningJob) {
  Start({"--latency_ms=600000"},
        {"--shutdown_grace=200ms", "--on_shutdown=cancel"});
  std::unique_ptr<Subprocess> client = StartJob("long");
  ASSERT_NE(client, nullptr);
  stack_->sdgd().Signal(SIGTERM);
  EXPECT_EQ(client->Wait(), 1);
  EXPECT_THAT(Stderr("long"), HasSubstr("JOB_STATE_CANCELLED"));
  EXPECT_THAT(Stderr("long"),
              HasSubstr("server is shutting down (grace period ended)"));
  EXPECT_EQ(stack_->sdgd().Wait(), 0);
  // Nothing was lost: every row is in the errors file.
  int lines = 0;
  for (char c : ReadFile(stack_->dir() + "/long.jsonl.errors.jsonl"))
    lines += c == '\n';
  EXPECT_EQ(lines, 4);
}

TEST_F(ShutdownTest, LongGraceLetsTheRunningJobFinish) {
  Start({"--latency_ms=1500"}, {"--shutdown_grace=60s"});
  std::unique_ptr<Subprocess> client = StartJob("short");
  ASSERT_NE(client, nullptr);
  stack_->sdgd().Signal(SIGTERM);
  EXPECT_EQ(client->Wait(), 0) << Stderr("short");
  EXPECT_THAT(Stderr("short"),
              HasSubstr("JOB_STATE_SUCCEEDED: 4/4 rows generated"));
  EXPECT_EQ(stack_->sdgd().Wait(), 0);
}

TEST_F(ShutdownTest, DrainingRefusesNewJobsUntilASecondSignal) {
  Start({"--latency_ms=600000"},
        {"--shutdown_grace=600s", "--on_shutdown=cancel"});
  std::unique_ptr<Subprocess> client = StartJob("held");
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  // The kubelet's HTTP probes, beside /metrics (they work with TLS on the
  // gRPC port, which the kubelet's gRPC probe cannot speak).
  const std::string probes =
      absl::StrReplaceAll(stack_->metrics_url(), {{"/metrics", ""}});
  EXPECT_EQ(HttpGet(probes + "/readyz").value_or("error"), "ready\n");
  stack_->sdgd().Signal(SIGTERM);
  ASSERT_TRUE(Eventually([&] {
    return Health() == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  }));
  EXPECT_EQ(Health("sdg.v1.GenerationService"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  // Kubernetes' liveness probe must not kill a draining server.
  EXPECT_EQ(Health("liveness"), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_THAT(HttpGet(probes + "/readyz").status().message(),
              HasSubstr("HTTP 503"));
  EXPECT_EQ(HttpGet(probes + "/healthz").value_or("error"), "ok\n");

  // sdgctl waits for a restarting server to come back; here it never does.
  CommandResult refused =
      stack_->Sdgctl({"generate", "--input=" + Input(),
                      "--output=" + stack_->dir() + "/new.jsonl", "--model=m",
                      "--template={{q}}", "--reconnect_for=1s"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("UNAVAILABLE: server is shutting down"));

  stack_->sdgd().Signal(SIGTERM);  // a second signal cancels at once
  EXPECT_EQ(client->Wait(), 1);
  EXPECT_THAT(Stderr("held"), HasSubstr("JOB_STATE_CANCELLED"));
  EXPECT_THAT(Stderr("held"),
              HasSubstr("server is shutting down (second signal)"));
  EXPECT_EQ(stack_->sdgd().Wait(), 0);
}

// sdgd gone for longer than sdgctl waits: the job is stored and resumes
// when sdgd starts again, so its rows have not failed. sdgctl says so and
// writes none of them into the errors file (it once wrote every row not
// yet generated there, as "not generated: following the job ended...").
TEST_F(ShutdownTest, RowsNotYetGeneratedWhenSdgdIsGoneAreNotCalledFailed) {
  Start({"--latency_ms=600000"}, {});
  auto client = stack_->StartSdgctl(
      {"generate", "--input=" + Input(),
       "--output=" + stack_->dir() + "/gone.jsonl", "--model=m",
       "--template={{q}}", "--batch_size=1", "--reconnect_for=1s"},
      stack_->dir() + "/gone.stderr");
  ASSERT_TRUE(client.ok()) << client.status();
  // Killed once sdgctl has the job (llmsim may see its first request before
  // CreateJob's answer reaches sdgctl) and a request is in flight.
  ASSERT_TRUE(Eventually([&] {
    return absl::StrContains(Stderr("gone"), " created\n") &&
           json::parse(stack_->LlmsimStats())["in_flight"].get<int>() >= 1;
  }));
  stack_->sdgd().Signal(SIGKILL);
  stack_->sdgd().Wait();

  EXPECT_EQ((*client)->Wait(), 1);
  EXPECT_EQ(ReadFile(stack_->dir() + "/gone.jsonl.errors.jsonl"), "");
  EXPECT_EQ(ReadFile(stack_->dir() + "/gone.jsonl"), "");
  const std::string said = Stderr("gone");
  EXPECT_THAT(said, HasSubstr("0/4 rows generated"));
  EXPECT_THAT(said, HasSubstr("4 rows not yet generated (they have not "
                              "failed)"));
  EXPECT_THAT(said, HasSubstr("sdgctl watch "));
  EXPECT_THAT(said, ::testing::Not(HasSubstr("not generated:")));
}

}  // namespace
}  // namespace sdg::testing
