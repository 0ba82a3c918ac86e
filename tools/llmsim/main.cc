// llmsim: an OpenAI-compatible simulator for sdgd's tests, demo and benches.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tools/llmsim/sim_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8000", "HOST:PORT (port 0: any)");
ABSL_FLAG(std::string, model, "sim-model",
          "the one model it serves (llamacpp mode: a file path, as "
          "llama-server's -m, which /v1/models lists as its id)");
ABSL_FLAG(std::string, mode, "vllm",
          "vllm (prompt lists, n) or llamacpp (one prompt per request, /props "
          "with total_slots, n != 1 refused with HTTP 500, any model name, "
          "samples that follow the seed, few HTTP threads) or openai (a "
          "hosted API: models owned_by \"system\", no /tokenize)");
ABSL_FLAG(int, slots, 1, "llamacpp mode: slots, i.e. requests served at once");
ABSL_FLAG(int, http_threads, 0,
          "llamacpp mode: HTTP threads, each holding one connection until it "
          "closes or idles past --keep_alive_ms (0: slots + 2, as "
          "llama-server's --parallel + 2)");
ABSL_FLAG(int, keep_alive_ms, 5000,
          "llamacpp mode: an idle keep-alive connection is closed after this");
ABSL_FLAG(int, loading_ms, 0,
          "llamacpp mode: answer everything but /stats 503 \"Loading model\" "
          "for this long after start");
ABSL_FLAG(int, busy_status, 0,
          "status answered at once when every slot is busy (503 as "
          "llama-cpp-python); 0: requests queue (llama.cpp server)");
ABSL_FLAG(int, capacity, 0,
          "requests served at once; more queue, so latency grows (0: no "
          "limit)");
ABSL_FLAG(int, latency_ms, 0, "service time of each generation request");
ABSL_FLAG(int, ms_per_token, 0, "service time per generated token");
ABSL_FLAG(std::string, api_key, "",
          "require Authorization: Bearer KEY (empty: no check)");
ABSL_FLAG(double, fail_rate, 0,
          "share of requests answered --fail_code at once");
ABSL_FLAG(int, fail_code, 503, "HTTP status of simulated failures");
ABSL_FLAG(int, retry_after, 0,
          "Retry-After seconds sent with failures (0: none)");
ABSL_FLAG(int64_t, rpm, 0,
          "requests a minute, as a hosted API limits them: more are answered "
          "429 rate_limit_exceeded (0: no limit)");
ABSL_FLAG(int64_t, tpm, 0,
          "tokens (prompt and completion) a minute, as --rpm (0: no limit)");
ABSL_FLAG(int, rate_window_s, 60,
          "--rpm and --tpm hold this many seconds of their limit: a burst of "
          "more is refused even within the minute's total");
ABSL_FLAG(bool, rate_limit_headers, true,
          "send x-ratelimit-* headers with --rpm and --tpm");
ABSL_FLAG(double, hang_rate, 0, "share of requests never answered");
ABSL_FLAG(double, reset_rate, 0,
          "share of requests whose connection closes mid-response");
ABSL_FLAG(double, malformed_rate, 0,
          "share of requests answered 200 with a body that is not JSON");
ABSL_FLAG(double, slow_body_rate, 0,
          "share of requests whose body trickles out over --slow_body_ms");
ABSL_FLAG(int, slow_body_ms, 1000, "how long a slow body takes");
ABSL_FLAG(std::string, fault_script, "",
          "faults of the first requests, in order, before any random draw: "
          "ok, hang, reset, malformed, slow or an HTTP status, comma-separated "
          "(e.g. hang,hang,hang,400)");
ABSL_FLAG(std::string, replies, "",
          "JSON lines {\"match\": SUBSTRING or [SUBSTRING...], \"reply\": "
          "TEXT}: the first line whose substrings all appear in the prompt "
          "(chat: in the messages) gives the reply, {{i}} the sample index; "
          "other requests get the echo reply");
ABSL_FLAG(uint64_t, fault_seed, 1,
          "seed of the fault draws (reproducible runs)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "llmsim --listen HOST:PORT --model NAME [--mode vllm|llamacpp|openai] "
      "[--latency_ms N] [fault flags]");
  absl::ParseCommandLine(argc, argv);
  sdg::llmsim::SimServer::Options options;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "vllm") {
    options.mode = sdg::llmsim::Mode::kVllm;
  } else if (mode == "llamacpp") {
    options.mode = sdg::llmsim::Mode::kLlamaCpp;
  } else if (mode == "openai") {
    options.mode = sdg::llmsim::Mode::kOpenAi;
  } else {
    std::fprintf(stderr,
                 "llmsim: --mode must be vllm, llamacpp or openai, got %s\n",
                 mode.c_str());
    return 2;
  }
  options.slots = absl::GetFlag(FLAGS_slots);
  options.busy_status = absl::GetFlag(FLAGS_busy_status);
  options.http_threads = absl::GetFlag(FLAGS_http_threads);
  options.keep_alive_ms = absl::GetFlag(FLAGS_keep_alive_ms);
  options.loading_ms = absl::GetFlag(FLAGS_loading_ms);
  options.capacity = absl::GetFlag(FLAGS_capacity);
  options.ms_per_token = absl::GetFlag(FLAGS_ms_per_token);
  options.api_key = absl::GetFlag(FLAGS_api_key);
  options.reset_rate = absl::GetFlag(FLAGS_reset_rate);
  options.malformed_rate = absl::GetFlag(FLAGS_malformed_rate);
  options.slow_body_rate = absl::GetFlag(FLAGS_slow_body_rate);
  options.slow_body_ms = absl::GetFlag(FLAGS_slow_body_ms);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.model = absl::GetFlag(FLAGS_model);
  options.latency_ms = absl::GetFlag(FLAGS_latency_ms);
  options.fail_rate = absl::GetFlag(FLAGS_fail_rate);
  options.fail_code = absl::GetFlag(FLAGS_fail_code);
  options.retry_after_s = absl::GetFlag(FLAGS_retry_after);
  options.hang_rate = absl::GetFlag(FLAGS_hang_rate);
  options.rpm = absl::GetFlag(FLAGS_rpm);
  options.tpm = absl::GetFlag(FLAGS_tpm);
  options.rate_window_s = absl::GetFlag(FLAGS_rate_window_s);
  options.rate_limit_headers = absl::GetFlag(FLAGS_rate_limit_headers);
  options.fault_seed = absl::GetFlag(FLAGS_fault_seed);
  options.fault_script = absl::GetFlag(FLAGS_fault_script);
  options.replies_file = absl::GetFlag(FLAGS_replies);
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
