// llmsim's HTTP server: one libevent loop, any number of keep-alive
// connections, replies delayed by a timer (never a sleeping thread), so
// hundreds of slow requests cost nothing.
#ifndef SDG_TESTS_LLMSIM_SIM_SERVER_H_
#define SDG_TESTS_LLMSIM_SIM_SERVER_H_

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "tests/llmsim/simulator.h"

struct event;
struct event_base;
struct evhttp;
struct evhttp_connection;
struct evhttp_request;

namespace sdg::llmsim {

class SimServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:0";
    std::string model = "sim-model";
    int latency_ms = 0;
    // Faults, drawn per generation request in arrival order from a generator
    // seeded with fault_seed, so a run is reproducible.
    double fail_rate = 0;  // answer fail_code at once
    int fail_code = 503;
    int retry_after_s = 0;  // sent with failures when > 0
    double hang_rate = 0;   // never answer
    uint64_t fault_seed = 1;
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

 private:
  struct Pending;
  struct Stats {
    int64_t requests = 0;  // generation requests (completions and chat)
    std::map<int, int64_t> by_status;
    int64_t in_flight = 0;
    int64_t max_in_flight = 0;
    int64_t prompts = 0;
    int64_t closed_by_client = 0;  // connections closed before the reply
    int64_t hung = 0;              // requests chosen to never be answered
  };

  explicit SimServer(const Options& options);
  static void OnRequest(evhttp_request* request, void* self);
  static void OnTimer(int fd, short what, void* pending);
  static void OnConnectionClosed(evhttp_connection* connection, void* self);
  static void OnPeerReadable(int fd, short what, void* pending);
  // Frees the delayed replies of a connection whose client went away.
  void DropPending(evhttp_connection* connection);
  static void OnSignal(int fd, short what, void* self);

  void Handle(evhttp_request* request);
  void Reply(evhttp_request* request, int status, const std::string& body);
  void ReplyLater(evhttp_request* request, SimReply reply,
                  std::optional<int> latency_ms);
  std::string StatsJson() const;

  const Options options_;
  const Simulator simulator_;
  event_base* base_ = nullptr;
  evhttp* http_ = nullptr;
  event* sigint_ = nullptr;
  event* sigterm_ = nullptr;
  int port_ = 0;
  Stats stats_;
  std::mt19937_64 fault_random_;
  // Delayed replies by connection, so a closed connection frees its own.
  std::map<evhttp_connection*, std::set<Pending*>> pending_;
};

}  // namespace sdg::llmsim

#endif  // SDG_TESTS_LLMSIM_SIM_SERVER_H_
