#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/periodic_task.h"
#include "base/status_macros.h"
#include "grpc/health/v1/health.pb.h"
#include "server/store/memory_job_store.h"
#include "server/store/postgres_job_store.h"
#include "server/store/replica_lease.h"
#include "server/store/sqlite_job_store.h"

namespace sdg {
namespace {

// Reflection on or off for one ServerBuilder. Linking grpc++_reflection
// registers its plugin for every builder at static initialization, so off
// means taking it out again.
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    const std::string name =
        grpc::reflection::ProtoServerReflectionPlugin().name();
    std::erase_if(*plugins, [&name](const auto& plugin) {
      return plugin->name() == name;
    });
    if (enabled_) {
      plugins->push_back(
          std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
    }
  }

 private:
  const bool enabled_;
};

// Refuses options no server can run with; fills in the per-tenant limits
// left at 0 (a tenant may use what the server has).
absl::Status CheckAndDefault(ServerOptions& options) {
  if (options.backends.empty()) {
    return absl::InvalidArgumentError(
        "no backend configured: pass --backend NAME=http://HOST:PORT/v1");
  }
  Scheduler::Options& scheduling = options.scheduler;
  if (scheduling.max_workers < 1 || scheduling.max_jobs < 1 ||
      scheduling.max_queued_jobs < 0 || scheduling.tenant_max_jobs < 0 ||
      scheduling.tenant_max_queued_jobs < 0 ||
      scheduling.tenant_max_enqueued_tokens < 0) {
    return absl::InvalidArgumentError(
        "--max_workers and --max_jobs must be at least 1, --max_queued_jobs, "
        "--tenant_max_jobs, --tenant_max_queued_jobs and "
        "--tenant_max_enqueued_tokens at least 0");
  }
  if (scheduling.tenant_max_jobs == 0) {
    scheduling.tenant_max_jobs = scheduling.max_jobs;
  }
  if (scheduling.tenant_max_queued_jobs == 0) {
    scheduling.tenant_max_queued_jobs = scheduling.max_queued_jobs;
  }
  return absl::OkStatus();
}

// The store the options name: the caller's, memory (ephemeral), PostgreSQL
// (database) or SQLite + files under state_dir. `on_health` hears when
// commits stop and start working; `on_standby`, when another replica holds
// the database's lease and this one waits; `on_heartbeat`, the replicas
// alive after each heartbeat.
absl::StatusOr<std::shared_ptr<JobStore>> OpenStore(
    const ServerOptions& opts,
    std::function<void(bool up, const absl::Status& error)> on_health,
    std::function<void(const std::string& active)> on_standby,
    std::function<void(const ReplicaLease::LiveReplicas&)> on_heartbeat) {
  if (opts.store != nullptr) return opts.store;
  if (opts.ephemeral) return std::make_shared<MemoryJobStore>();
  CommitterOptions committer;
  committer.max_outage = opts.store_outage_limit;
  committer.on_health = std::move(on_health);
  if (!opts.database.empty()) {
    PostgresJobStore::Options store_options;
    store_options.conninfo = opts.database;
    store_options.committer = std::move(committer);
    ReplicaLease::Options lease;
    lease.ttl = opts.replica_lease;
    lease.on_lost = opts.on_lease_lost;
    lease.stop_waiting = opts.stop_waiting;
    lease.on_standby = std::move(on_standby);
    lease.on_heartbeat = std::move(on_heartbeat);
    store_options.replica_lease = std::move(lease);
    // A replica started before its database, or a standby that loses it,
    // waits for it (not ready) rather than exiting into a crash loop.
    store_options.wait_for_database = true;
    absl::StatusOr<std::unique_ptr<PostgresJobStore>> store =
        PostgresJobStore::Open(std::move(store_options));
    if (!store.ok()) return store.status();
    return std::shared_ptr<JobStore>(*std::move(store));
  }
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store =
      SqliteJobStore::Open(opts.state_dir, std::move(committer));
  if (!store.ok()) return store.status();
  return std::shared_ptr<JobStore>(*std::move(store));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  SDG_RETURN_IF_ERROR(CheckAndDefault(options));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<Server> server(new Server());
  server->options_ = std::move(options);
  const ServerOptions& opts = server->options_;

  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics_server =
      MetricsServer::Create(opts.metrics_listen, server->metrics_);
  if (!metrics_server.ok()) return metrics_server.status();
  server->metrics_server_ = *std::move(metrics_server);

  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return loop.status();
  server->loop_ = *std::move(loop);
  absl::StatusOr<std::unique_ptr<HttpClient>> http =
      HttpClient::Create(opts.http, *server->loop_);
  if (!http.ok()) return http.status();
  server->http_ = *std::move(http);

  BackendNames backend_names;  // the default first
  absl::StatusOr<BackendShardRunner::Backends> backends_by_name =
      server->StartBackends(backend_names);
  if (!backends_by_name.ok()) return backends_by_name.status();

  absl::StatusOr<std::shared_ptr<JobStore>> store = OpenStore(
      opts,
      [&metrics = server->metrics_, &ready = *server->metrics_server_](
          bool up, const absl::Status&) {
        metrics.StoreUp(up);
        ready.SetStoreUp(up);
      },
      // A standby is alive (/healthz) and not ready (/readyz).
      [&ready = *server->metrics_server_](const std::string&) {
        ready.SetReady(false);
      },
      [&metrics = server->metrics_](const ReplicaLease::LiveReplicas& live) {
        metrics.ReplicasLive(live.active, live.standby);
      });
  if (!store.ok()) return store.status();
  server->store_ = *std::move(store);
  server->metrics_.ReplicaActive(true);

  absl::StatusOr<std::unique_ptr<Authenticator>> authenticator =
      Authenticator::Create(opts.auth, server->metrics_);
  if (!authenticator.ok()) return authenticator.status();
  server->authenticator_ = *std::move(authenticator);

  server->metrics_.Workers(opts.scheduler.max_workers);
  server->runner_ = std::make_unique<BackendShardRunner>(
      *std::move(backends_by_name), server->metrics_);
  server->scheduler_ = std::make_unique<Scheduler>(
      opts.scheduler, *server->runner_, *server->loop_, server->metrics_);
  server->jobs_ = std::make_unique<JobService>(
      opts.service, std::move(backend_names), *server->scheduler_,
      *server->store_, server->metrics_);
  server->blocking_ =
      std::make_unique<Executor>(opts.blocking_threads, "sdg-blocking");
  server->service_ = std::make_unique<GenerationService>(
      *server->authenticator_, *server->jobs_, *server->blocking_);
  // Before the port opens: a client never sees a stored job as NOT_FOUND.
  absl::StatusOr<int> resumed = server->jobs_->ResumeStoredJobs();
  if (!resumed.ok()) return resumed.status();
  server->resumed_jobs_ = *resumed;
  server->jobs_->RemoveExpired();
  server->retention_ = std::make_unique<PeriodicTask>(
      server->jobs_->RetentionPeriod(),
      [jobs = server->jobs_.get()] { jobs->RemoveExpired(); });

  SDG_RETURN_IF_ERROR(server->StartBatchApi());
  SDG_RETURN_IF_ERROR(server->StartGrpc(*std::move(credentials)));
  // Ready once it serves: not while it waits for its database, as a
  // standby, or while it resumes the stored jobs.
  server->metrics_server_->SetReady(true);
  return server;
}

absl::StatusOr<BackendShardRunner::Backends> Server::StartBackends(
    BackendNames& names) {
  BackendShardRunner::Backends by_name;
  for (const BackendOptions& backend_options : options_.backends) {
    if (by_name.contains(backend_options.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--backend ", backend_options.name,
                       " is given twice; list several "
                       "URLs as NAME=URL1,URL2 instead"));
    }
    auto backend = std::make_unique<Backend>(backend_options, *http_, metrics_);
    names.push_back(backend_options.name);
    by_name[backend_options.name] = backend.get();
    backends_.push_back(std::move(backend));
  }
  options_.service.backend_models = [by_name](const std::string& name) {
    auto it = by_name.find(name);
    return it == by_name.end() ? std::vector<std::string>()
                               : it->second->models();
  };
  options_.service.backend_down = [by_name](const std::string& name) {
    auto it = by_name.find(name);
    return it != by_name.end() && it->second->down();
  };
  prompt_counter_ = std::make_unique<BackendPromptCounter>(by_name);
  options_.service.prompt_counter = prompt_counter_.get();
  return by_name;
}

absl::Status Server::StartBatchApi() {
  if (options_.openai_listen.empty()) return absl::OkStatus();
  batches_ = std::make_unique<BatchService>(options_.batch, *jobs_, *store_);
  batch_api_ = std::make_unique<BatchApi>(*authenticator_, *batches_,
                                          options_.service.job_retention);
  ApiHttpServer::Options http;
  http.listen = options_.openai_listen;
  http.tls = options_.tls;
  // The largest file, and its form's headers.
  http.max_body_bytes =
      static_cast<size_t>(options_.batch.max_file_bytes) + (1 << 20);
  openai_requests_ =
      std::make_unique<Executor>(options_.openai_threads, "sdg-openai");
  absl::StatusOr<std::unique_ptr<ApiHttpServer>> server = ApiHttpServer::Create(
      http,
      [api = batch_api_.get()](const ApiRequest& request) {
        return api->Handle(request);
      },
      *openai_requests_);
  if (!server.ok()) return server.status();
  api_http_ = *std::move(server);
  Log(LogLevel::kInfo, "serving the OpenAI Batch API",
      {{"listen", options_.openai_listen},
       {"port", api_http_->port()},
       {"tls", options_.tls.enabled()}});
  return absl::OkStatus();
}

absl::Status Server::StartGrpc(
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  // The default health service carries no protobuf descriptors; linking
  // health.proto's lets reflection describe grpc.health.v1.Health, so that
  // grpcurl and deploy/smoke.sh can call it knowing no .proto file.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<ReflectionOption>(options_.reflection));
  builder.AddListeningPort(options_.listen, std::move(credentials), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(options_.max_request_bytes);
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen,
                     " (is the port in use? set --listen)"));
  }
  grpc::HealthCheckServiceInterface* health =
      grpc_server_->GetHealthCheckService();
  for (const char* service : {"", kServiceName, kLivenessService}) {
    health->SetServingStatus(service, true);
  }
  if (!options_.tls.enabled() && !IsLoopbackAddress(options_.listen)) {
    Log(LogLevel::kWarning,
        "gRPC port is plaintext and reachable beyond this host: requests, "
        "rows and tokens cross the network unencrypted; set --tls_cert and "
        "--tls_key (or listen on 127.0.0.1 behind a TLS proxy)",
        {{"listen", options_.listen}});
  }
  if (!authenticator_->enabled() && !IsLoopbackAddress(options_.listen)) {
    Log(LogLevel::kWarning,
        "no --auth_tokens_file: every caller can see and cancel every job",
        {{"listen", options_.listen}});
  }
  return absl::OkStatus();
}

Server::~Server() {
  // A server that failed to start has no gRPC server to stop.
  if (grpc_server_ != nullptr) Shutdown(absl::ZeroDuration());
}

void Server::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  Log(LogLevel::kInfo, "shutdown: draining",
      {{"grace_s", absl::ToDoubleSeconds(grace)}});
  // Readiness fails so that load balancers stop sending jobs; liveness
  // holds, so that an orchestrator lets the drain finish.
  // /readyz first: once a client sees gRPC health NOT_SERVING, both say so.
  metrics_server_->SetReady(false);
  for (const char* service : {"", kServiceName}) {
    grpc_server_->GetHealthCheckService()->SetServingStatus(service, false);
  }
  jobs_->StartDraining();
  if (!jobs_->AwaitJobsFinished(absl::Now() + grace)) {
    Log(LogLevel::kWarning, "shutdown: grace period ended",
        {{"jobs", SuspendsOnShutdown() ? "suspended" : "cancelled"}});
    StopJobsNow("grace period ended");
    jobs_->AwaitJobsFinished(absl::InfiniteFuture());
  }
  Log(LogLevel::kInfo, "shutdown: jobs stopped, closing calls");
  api_http_.reset();  // answers the requests it is handling first
  // Every job has committed its last event; give the streams a moment to
  // deliver it, then stop. Reactors all call Finish, so this returns early.
  grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc_server_->Wait();
  Log(LogLevel::kInfo, "shutdown: done");
}

bool Server::SuspendsOnShutdown() const {
  return options_.on_shutdown == ServerOptions::OnShutdown::kSuspend &&
         store_->durable();
}

void Server::StopJobsNow(absl::string_view why) {
  const std::string reason =
      absl::StrCat("server is shutting down (", why, ")");
  if (SuspendsOnShutdown()) {
    jobs_->SuspendAllJobs(absl::UnavailableError(reason));
  } else {
    jobs_->CancelAllJobs(absl::CancelledError(reason));
  }
}

}  // namespace sdg
