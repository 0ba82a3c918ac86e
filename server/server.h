// sdgd as an object: the gRPC server (GenerationService, health, reflection),
// the metrics endpoint, the scheduler and the backends, wired together and
// torn down in a stated order. main.cc and the tests both use it.
#ifndef SDG_SERVER_SERVER_H_
#define SDG_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/api/generation_service.h"
#include "server/backend/backend.h"
#include "server/http/http_client.h"
#include "server/observability/metrics.h"
#include "server/observability/metrics_server.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/shard_runner.h"

namespace sdg {

// Health service names: "" and kServiceName turn NOT_SERVING when shutdown
// starts (readiness); kLivenessService stays SERVING until the process ends.
inline constexpr char kServiceName[] = "sdg.v1.GenerationService";
inline constexpr char kLivenessService[] = "liveness";

struct ServerOptions {
  std::string listen = "0.0.0.0:50051";
  std::string metrics_listen = "0.0.0.0:9464";
  // Largest GenerateJob request (inline datasets are big); gRPC's default is
  // 4 MiB.
  int max_request_bytes = 256 << 20;
  // The first is the default backend.
  std::vector<BackendOptions> backends;
  Scheduler::Options scheduler;
  HttpClient::Options http;
  GenerationService::Options service;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);
  // Shuts down at once (no grace) if Shutdown was not called.
  ~Server();

  int port() const { return port_; }
  int metrics_port() const { return metrics_server_->port(); }
  Metrics& metrics() { return metrics_; }

  // Health turns NOT_SERVING and new jobs get UNAVAILABLE at once; running
  // jobs get `grace` to end, then are cancelled; every stream gets its
  // `finished` event; then the gRPC server stops. Blocks until done.
  void Shutdown(absl::Duration grace);
  // Cancels every running job now (a second signal during Shutdown).
  void CancelAllJobs();

 private:
  Server() = default;

  // Declaration order is construction order; destruction runs backwards.
  ServerOptions options_;
  Metrics metrics_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<HttpClient> http_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<ShardRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVER_H_
