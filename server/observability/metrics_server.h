// Serves the Prometheus scrape (GET /metrics) over HTTP from one libevent
// loop on its own thread. (prometheus-cpp's civetweb exposer needs up to 2 s
// to stop, which every shutdown would pay.) Also GET /healthz (200 while the
// process runs) and /readyz (200 from the moment the server serves until
// shutdown starts; 503 before, as while it waits for its database or as a
// standby, after, and while the job store cannot commit): the
// kubelet's probes, which cannot speak TLS to the gRPC port's health
// service. Nothing here is a tenant's or a job's.
#ifndef SDG_SERVER_OBSERVABILITY_METRICS_SERVER_H_
#define SDG_SERVER_OBSERVABILITY_METRICS_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/observability/metrics.h"

struct event_base;
struct evhttp;
struct evhttp_request;

namespace sdg {

class MetricsServer {
 public:
  // `listen` is HOST:PORT (IPv4, or [IPv6]:PORT); port 0 picks a free port.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Create(
      const std::string& listen, const Metrics& metrics);
  // Stops serving at once and joins the thread.
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // /readyz answers 503 until this is true (the server has started), and
  // again once it is false (shutdown).
  void SetReady(bool ready) { ready_.store(ready); }
  // /readyz answers 503 while this is false (the job store cannot commit).
  void SetStoreUp(bool up) { store_up_.store(up); }

 private:
  explicit MetricsServer(const Metrics& metrics) : metrics_(metrics) {}
  static void OnRequest(evhttp_request* request, void* self);

  const Metrics& metrics_;
  event_base* base_ = nullptr;
  evhttp* http_ = nullptr;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> store_up_{true};
  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_OBSERVABILITY_METRICS_SERVER_H_
