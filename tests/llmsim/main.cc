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

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "llmsim --listen HOST:PORT --model NAME [--latency_ms N]");
  absl::ParseCommandLine(argc, argv);
  sdg::llmsim::SimServer::Options options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.model = absl::GetFlag(FLAGS_model);
  options.latency_ms = absl::GetFlag(FLAGS_latency_ms);
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
