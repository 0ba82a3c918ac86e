// sdgd as an object: the gRPC server (GenerationService, health, reflection),
// the metrics endpoint, the scheduler and the backends, wired together and
// torn down in a stated order. main.cc and the tests both use it.
#ifndef SDG_SERVER_SERVER_H_
#define SDG_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/executor.h"
#include "server/api/api_http_server.h"
#include "server/api/authenticator.h"
#include "server/api/batch_api.h"
#include "server/api/generation_service.h"
#include "server/api/transport_security.h"
#include "server/backend/backend.h"
#include "server/http/http_client.h"
#include "server/observability/metrics.h"
#include "server/observability/metrics_server.h"
#include "server/scheduling/prompt_counter.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/shard_runner.h"
#include "server/service/batch_service.h"
#include "server/service/job_service.h"
#include "server/store/job_store.h"

namespace sdg {

class PeriodicTask;

// Health service names: "" and kServiceName turn NOT_SERVING when shutdown
// starts (readiness); kLivenessService stays SERVING until the process ends.
inline constexpr char kServiceName[] = "sdg.v1.GenerationService";
inline constexpr char kLivenessService[] = "liveness";

struct ServerOptions {
  std::string listen = "0.0.0.0:50051";
  // Its own port, so that a NetworkPolicy can open it to the monitoring
  // namespace alone; it serves counts, never a tenant's or a job's data.
  std::string metrics_listen = "0.0.0.0:9464";
  TlsOptions tls;
  Authenticator::Options auth;
  // grpc.reflection.v1alpha, open to every caller like health (grpcurl's
  // list and describe, deploy/smoke.sh); off for operators who want the
  // API's shape closed.
  bool reflection = true;
  // Largest GenerateJob request (inline datasets are big); gRPC's default is
  // 4 MiB.
  int max_request_bytes = 256 << 20;
  // The first is the default backend.
  std::vector<BackendOptions> backends;
  Scheduler::Options scheduler;
  // The job store: SQLite and files under state_dir, or nothing that
  // outlives the process when ephemeral.
  std::string state_dir = "sdgd-data";
  bool ephemeral = false;
  // The PostgreSQL store instead (a libpq conninfo or postgresql:// URL,
  // which may hold a password: never logged); empty: state_dir.
  std::string database;
  // With database: replicas sharing it elect the active one by a lease of
  // this length (replica_lease.h); Create waits as a standby meanwhile.
  absl::Duration replica_lease = absl::Seconds(10);
  // Ends a standby's wait: Create returns CANCELLED.
  const absl::Notification* stop_waiting = nullptr;
  // Runs once (any thread) if another replica takes the lease over: this
  // server must stop at once, since its jobs now run there.
  std::function<void(const absl::Status&)> on_lease_lost;
  // How long the state_dir's event logs retry failing commits (jobs paused
  // meanwhile) before their jobs are suspended.
  absl::Duration store_outage_limit = absl::Minutes(5);
  // A store made by the caller (tests, embedders) instead of the one
  // state_dir or ephemeral names.
  std::shared_ptr<JobStore> store;
  // After the shutdown grace: suspend running jobs (they resume on the next
  // start) or cancel them. Ephemeral servers always cancel.
  enum class OnShutdown { kSuspend, kCancel };
  OnShutdown on_shutdown = OnShutdown::kSuspend;
  HttpClient::Options http;
  JobService::Options service;
  // Threads that run the calls' work that blocks on the store (admission,
  // deletion, uploads): how many such calls progress at once.
  int blocking_threads = 4;
  // The OpenAI Batch API's HTTP port (HOST:PORT, port 0 a free one), with
  // `tls` and `auth` as the gRPC port; empty: not served.
  std::string openai_listen;
  // Threads that run its requests (an upload holds one while it arrives,
  // so slow uploads never hold up the gRPC calls' blocking work).
  int openai_threads = 8;
  BatchService::Options batch;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);
  // Shuts down at once (no grace) if Shutdown was not called.
  ~Server();

  int port() const { return port_; }
  int metrics_port() const { return metrics_server_->port(); }
  // The Batch API's port; 0 when it is not served.
  int openai_port() const { return api_http_ ? api_http_->port() : 0; }
  Metrics& metrics() { return metrics_; }

  // Health turns NOT_SERVING and new jobs get UNAVAILABLE at once; running
  // jobs get `grace` to end, then are suspended (watchers get UNAVAILABLE)
  // or cancelled (every stream gets its `finished` event), as on_shutdown
  // says; then the gRPC server stops. Blocks until done.
  void Shutdown(absl::Duration grace);
  // Ends the grace period now (a second signal during Shutdown): suspends
  // or cancels every running job, saying `why`.
  void StopJobsNow(absl::string_view why);
  // Jobs resumed from the store at start.
  int resumed_jobs() const { return resumed_jobs_; }

 private:
  Server() = default;
  bool SuspendsOnShutdown() const;
  // Makes the backends (their names into `names`, the default first) and
  // gives the service what it asks of them: their models, whether they are
  // down, and prompt counts for estimates.
  absl::StatusOr<BackendShardRunner::Backends> StartBackends(
      BackendNames& names);
  // The Batch API's port, when options_.openai_listen names one.
  absl::Status StartBatchApi();
  // Registers the service and opens the port; the health service serves.
  absl::Status StartGrpc(std::shared_ptr<grpc::ServerCredentials> credentials);

  // Declaration order is construction order; destruction runs backwards.
  ServerOptions options_;
  Metrics metrics_;
  std::unique_ptr<MetricsServer> metrics_server_;
  // The thread that runs HTTP transfers and every timer (retry backoff,
  // endpoint return, job timeouts); destroyed after all of their users.
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<HttpClient> http_;
  std::vector<std::unique_ptr<Backend>> backends_;
  // Before the scheduler and the service: their jobs write to it until they
  // are destroyed.
  std::shared_ptr<JobStore> store_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<ShardRunner> runner_;
  std::unique_ptr<PromptCounter> prompt_counter_;  // EstimateJob's
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<JobService> jobs_;
  // Runs the calls' work that blocks on the store; after the gRPC server in
  // destruction, since a pending call waits for it to finish the call.
  std::unique_ptr<Executor> blocking_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<BatchService> batches_;
  std::unique_ptr<BatchApi> batch_api_;
  // The Batch API's requests run here, not on blocking_.
  std::unique_ptr<Executor> openai_requests_;
  // Before its executor in destruction: its requests are answered first.
  std::unique_ptr<ApiHttpServer> api_http_;
  // Runs the JobService's RemoveExpired; stopped before it goes.
  std::unique_ptr<PeriodicTask> retention_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  int resumed_jobs_ = 0;
  bool shut_down_ = false;
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVER_H_
