// llmsim: an OpenAI-compatible simulator for sdgd's tests, demo and benches.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tests/llmsim/sim_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8000", "HOST:PORT (port 0: any)");
ABSL_FLAG(std::string, model, "sim-model", "the one model it serves");
ABSL_FLAG(int, latency_ms, 0, "delay before each generation reply");
ABSL_FLAG(double, fail_rate, 0,
          "share of requests answered --fail_code at once");
ABSL_FLAG(int, fail_code, 503, "HTTP status of simulated failures");
ABSL_FLAG(int, retry_after, 0,
          "Retry-After seconds sent with failures (0: none)");
ABSL_FLAG(double, hang_rate, 0, "share of requests never answered");
ABSL_FLAG(uint64_t, fault_seed, 1,
          "seed of the fault draws (reproducible runs)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "llmsim --listen HOST:PORT --model NAME [--latency_ms N]");
  absl::ParseCommandLine(argc, argv);
  sdg::llmsim::SimServer::Options options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.model = absl::GetFlag(FLAGS_model);
  options.latency_ms = absl::GetFlag(FLAGS_latency_ms);
  options.fail_rate = absl::GetFlag(FLAGS_fail_rate);
  options.fail_code = absl::GetFlag(FLAGS_fail_code);
  options.retry_after_s = absl::GetFlag(FLAGS_retry_after);
  options.hang_rate = absl::GetFlag(FLAGS_hang_rate);
  options.fault_seed = absl::GetFlag(FLAGS_fault_seed);
  auto server = sdg::llmsim::SimServer::Create(options);
  if (!server.ok()) {
    std::fprintf(stderr, "llmsim: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  std::string host = options.listen.substr(0, options.listen.rfind(':'));
  std::printf("llmsim listening on %s:%d\n", host.c_str(), (*server)->port());
  std::fflush(stdout);
  (*server)->Run();
  return 0;
}
