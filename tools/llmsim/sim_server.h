// llmsim's HTTP server: one libevent loop, any number of keep-alive
// connections, replies delayed by a timer (never a sleeping thread), so
// hundreds of slow requests cost nothing.
//
// It imitates vLLM (prompt lists, n) or llama.cpp (one prompt per request,
// /props with total_slots, a fixed number of slots, n != 1 refused, 503
// while it loads its model, a few HTTP threads that each hold an idle
// keep-alive connection), a server that saturates
// (`capacity`: beyond it requests queue and latency grows), and the faults
// backends show in production, each drawn per request with a seeded
// generator so that a run is reproducible.
#ifndef SDG_TESTS_LLMSIM_SIM_SERVER_H_
#define SDG_TESTS_LLMSIM_SIM_SERVER_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/llmsim/simulator.h"

struct event;
struct event_base;
struct evhttp;
struct evhttp_connection;
struct evhttp_request;

namespace sdg::llmsim {

// kOpenAi: a hosted API as OpenAI's: /v1/models lists owned_by "system",
// and there is no /tokenize.
enum class Mode { kVllm, kLlamaCpp, kOpenAi };

class SimServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:0";
    std::string model = "sim-model";
    Mode mode = Mode::kVllm;
    // llama.cpp mode: the slots /props reports, which is also the capacity.
    int slots = 1;
    // With every slot busy, answer this status at once (llama-cpp-python's
    // 503) instead of queueing (llama.cpp server). 0: queue.
    int busy_status = 0;
    // llama.cpp mode: its HTTP threads (0: slots + 2, as llama-server's
    // --parallel + 2). A connection takes a thread at its first request and
    // holds it until it closes, so requests on more connections than threads
    // wait for one to close.
    int http_threads = 0;
    // llama.cpp mode: an idle keep-alive connection is closed after this
    // (cpp-httplib's keep-alive timeout, 5 s).
    int keep_alive_ms = 5000;
    // llama.cpp mode: every request but /stats is answered 503 "Loading
    // model" for this long after start.
    int loading_ms = 0;
    // Requests served at once; more wait in a FIFO queue. 0: no limit.
    int capacity = 0;
    // Service time: latency_ms + ms_per_token × generated tokens.
    int latency_ms = 0;
    int ms_per_token = 0;
    // Requests must carry "Authorization: Bearer <api_key>" when set.
    std::string api_key;
    // A hosted API's limits (OpenAI's): requests and tokens (a request's
    // prompt and completion tokens, counted when it arrives) a minute, 0
    // for none. Each is a bucket that holds rate_window_s seconds of its
    // limit (60: the whole minute), refilled continuously; a request that
    // finds either short is answered 429 rate_limit_exceeded and costs
    // nothing. Every generation reply carries x-ratelimit-limit-*,
    // x-ratelimit-remaining-* and x-ratelimit-reset-* for both.
    int64_t rpm = 0;
    int64_t tpm = 0;
    int rate_window_s = 60;
    // false: no x-ratelimit-* headers (a server that enforces limits
    // without saying where it stands).
    bool rate_limit_headers = true;

    // Faults: one draw per generation request decides at most one.
    double fail_rate = 0;  // answer fail_code at once
    int fail_code = 503;
    int retry_after_s = 0;      // sent with failures when > 0
    double hang_rate = 0;       // never answer
    double reset_rate = 0;      // close the connection mid-response
    double malformed_rate = 0;  // 200 with a body that is not JSON
    double slow_body_rate = 0;  // the body trickles out over slow_body_ms
    int slow_body_ms = 1000;
    uint64_t fault_seed = 1;
    // The faults of the first generation requests, in arrival order, before
    // any random draw: comma-separated steps, each "ok", "hang", "reset",
    // "malformed", "slow" or an HTTP status to fail with (e.g.
    // "hang,hang,hang,400"). Later requests draw as above.
    std::string fault_script;
    // Canned replies (ReplyBook's JSON lines); empty: echo every prompt.
    std::string replies_file;
  };

  // Binds the port; port 0 picks a free one.
  static absl::StatusOr<std::unique_ptr<SimServer>> Create(
      const Options& options);
  ~SimServer();

  int port() const { return port_; }
  // Serves until Stop(), SIGINT or SIGTERM.
  void Run();
  // Safe from any thread.
  void Stop();
  // Ends llama.cpp mode's loading now rather than after loading_ms (for
  // tests that must know the order of events). Safe from any thread.
  void EndLoading() { loading_ended_ = true; }

 private:
  enum class Fault { kNone, kHang, kReset, kMalformed, kSlowBody };
  // One step of Options::fault_script: a fault, or a status to fail with.
  struct ScriptStep {
    Fault fault = Fault::kNone;
    int fail_status = 0;
  };
  static absl::StatusOr<std::vector<ScriptStep>> ParseFaultScript(
      const std::string& script);
  struct Pending;
  struct Stats {
    int64_t requests = 0;  // generation requests (completions and chat)
    std::map<int, int64_t> by_status;
    int64_t in_flight = 0;  // generation requests not yet answered
    int64_t max_in_flight = 0;
    int64_t queued = 0;  // waiting for a slot (capacity)
    int64_t max_queued = 0;
    int64_t prompts = 0;
    // The usage of the replies answered: the sums of their "usage".
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t closed_by_client = 0;  // connections closed before the reply
    int64_t hung = 0;              // requests chosen to never be answered
    int64_t resets = 0;
    int64_t malformed = 0;
    int64_t slow_bodies = 0;
    int64_t discovery_requests = 0;  // GET /v1/models and /props
    int64_t tokenize_requests = 0;   // POST /tokenize and /apply-template
    // Connections that have sent a request and are not closed (llama.cpp
    // mode: each holds an HTTP thread), and the most at once.
    int64_t connections_open = 0;
    int64_t max_connections_open = 0;
    int64_t waiting_for_thread = 0;  // requests, llama.cpp mode
    int64_t max_waiting_for_thread = 0;
    // Milliseconds since start at which generation requests arrived (the
    // first kMaxArrivals).
    std::vector<int64_t> arrivals_ms;
  };
  static constexpr size_t kMaxArrivals = 10000;

  SimServer(const Options& options, std::shared_ptr<const ReplyBook> replies);
  static void OnRequest(evhttp_request* request, void* self);
  static void OnTimer(int fd, short what, void* pending);
  static void OnConnectionClosed(evhttp_connection* connection, void* self);
  static void OnPeerReadable(int fd, short what, void* pending);
  static void OnSignal(int fd, short what, void* self);

  void Handle(evhttp_request* request);
  // Handle, once the request's connection has an HTTP thread.
  void Serve(evhttp_request* request);
  // A connection closed: its thread goes to the longest-waiting request's
  // connection.
  void ReleaseThread(evhttp_connection* connection);
  int HttpThreads() const;
  bool Loading() const;
  void HandleGeneration(evhttp_request* request, SimReply reply);
  Fault DrawFault(evhttp_request* request, SimReply& reply);
  // Starts serving `pending` if a slot is free; otherwise it waits.
  void Admit(Pending* pending);
  void StartService(Pending* pending);
  // A slot freed: the longest-waiting request takes it.
  void EndService(Pending* pending);
  void Deliver(Pending* pending);
  void SendNextSlowChunk(Pending* pending);
  void ResetConnection(Pending* pending);
  // Removes `pending` from its connection's set and frees it.
  void Forget(Pending* pending);
  // Frees the delayed replies of a connection whose client went away.
  void DropPending(evhttp_connection* connection);
  void Reply(evhttp_request* request, int status, const std::string& body,
             bool generation);
  // A reply delivered whole: its prompts and tokens count in /stats.
  void CountAnswered(const SimReply& reply);
  std::string StatsJson() const;
  int Capacity() const;
  // The rate limits: false (and the 429 sent) when the request is over
  // them; the x-ratelimit headers added either way.
  bool AdmitByRateLimits(evhttp_request* request, const SimReply& reply);

  // A per-minute limit kept as a bucket (see Options::rpm).
  struct RateBucket {
    double per_second = 0;
    double capacity = 0;
    double level = 0;
    std::chrono::steady_clock::time_point refilled;
    void Refill(std::chrono::steady_clock::time_point now);
  };

  const Options options_;
  const Simulator simulator_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<bool> loading_ended_{false};
  event_base* base_ = nullptr;
  evhttp* http_ = nullptr;
  event* sigint_ = nullptr;
  event* sigterm_ = nullptr;
  int port_ = 0;
  Stats stats_;
  RateBucket requests_bucket_;
  RateBucket tokens_bucket_;
  std::mt19937_64 fault_random_;
  std::vector<ScriptStep> fault_script_;
  size_t next_script_step_ = 0;
  int in_service_ = 0;
  std::deque<Pending*> waiting_for_slot_;
  // Replies not yet sent, by connection, so a closed connection frees its own.
  std::map<evhttp_connection*, std::set<Pending*>> pending_;
  // Connections that have sent a request and are open; llama.cpp mode: those
  // holding an HTTP thread, and the requests waiting for one.
  std::set<evhttp_connection*> connections_;
  std::set<evhttp_connection*> threaded_;
  std::deque<evhttp_request*> waiting_for_thread_;
};

}  // namespace sdg::llmsim

#endif  // SDG_TESTS_LLMSIM_SIM_SERVER_H_
