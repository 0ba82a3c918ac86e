// sdgd: parses flags, wires the server, turns signals into shutdown.
#include <curl/curl.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/allocator.h"
#include "base/environment.h"
#include "base/logging.h"
#include "base/repeated_flag.h"
#include "base/signal_watcher.h"
#include "server/backend/backend_flags.h"
#include "server/server.h"
#include "server/store/postgres.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "gRPC address, HOST:PORT");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "Prometheus /metrics address, HOST:PORT");
ABSL_FLAG(int, max_workers, 64, "shards in progress at once, across all jobs");
ABSL_FLAG(int, max_jobs, 16, "jobs running at once; more wait in a queue");
ABSL_FLAG(int, max_queued_jobs, 64,
          "jobs waiting to run; beyond, GenerateJob gets RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_prompt_bytes, 1 << 20,
          "a row whose prompt renders longer fails with its own error");
ABSL_FLAG(int64_t, max_shard_prompt_bytes, 64 << 20,
          "the prompts of one shard together; rows past it fail");
ABSL_FLAG(int, backend_max_attempts, 3, "HTTP attempts per backend request");
ABSL_FLAG(absl::Duration, backend_outage_limit, absl::Minutes(10),
          "how long calls wait for a backend whose every endpoint is failing "
          "(refused, timing out, 502/503/504) before they fail; 0 fails them "
          "by the retry rules alone");
ABSL_FLAG(absl::Duration, backend_connect_timeout, absl::Seconds(5),
          "backend connect timeout");
ABSL_FLAG(absl::Duration, backend_request_timeout, absl::Seconds(600),
          "backend whole-request timeout");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(25),
          "time running jobs get to finish after SIGTERM");
ABSL_FLAG(absl::Duration, job_retention, absl::Hours(24 * 7),
          "how long finished jobs (and their results) are kept");
ABSL_FLAG(std::string, state_dir, "sdgd-data",
          "the job store: SQLite and files; jobs resume from it on start");
ABSL_FLAG(absl::Duration, store_outage_limit, absl::Minutes(5),
          "how long jobs pause while their results cannot be committed to "
          "--state_dir (disk full, unwritable) before they are suspended; "
          "commits are retried meanwhile, and jobs go on by themselves once "
          "they succeed; 0 suspends at the first failure");
ABSL_FLAG(std::string, store, "",
          "the job store in PostgreSQL instead of --state_dir: a "
          "postgresql:// URL or libpq key=value string without a password "
          "(it would show in ps and logs; libpq reads PGPASSWORD or "
          "PGPASSFILE); TLS through sslmode (verify-full supported)");
ABSL_FLAG(std::string, store_url_file, "",
          "a file holding --store's value, which may carry the password "
          "(e.g. a Kubernetes Secret mounted as a file)");
ABSL_FLAG(absl::Duration, replica_lease, absl::Seconds(10),
          "with --store: replicas sharing the database elect the active one "
          "by a lease it renews every third of this; the others wait as "
          "standbys (/readyz 503) and one takes over this long after the "
          "active dies, at once after it stops");
ABSL_FLAG(bool, ephemeral, false,
          "keep jobs in memory only: nothing survives a restart");
ABSL_FLAG(std::string, data_root, "",
          "directory that requests' dataset_path may name files under "
          "(empty: dataset_path is refused); with --auth_tokens_file each "
          "tenant reads its own folder, DATA_ROOT/TENANT/");
ABSL_FLAG(std::string, data_root_shared, "",
          "a folder under --data_root that every tenant may read, named as "
          "FOLDER/FILE (empty: none)");
ABSL_FLAG(std::string, openai_listen, "",
          "HOST:PORT of the OpenAI Batch API (/v1/files, /v1/batches), with "
          "the gRPC port's TLS and tokens (empty: not served)");
ABSL_FLAG(absl::Duration, openai_completion_window, absl::Hours(24),
          "how long a batch runs before it expires, keeping its completed "
          "lines (a batch's completion_window, \"24h\", is this long here)");
ABSL_FLAG(int64_t, openai_max_file_mib, 200,
          "largest Batch API file, in MiB (OpenAI's limit is 200 MB)");
ABSL_FLAG(int64_t, openai_max_file_lines, 50000,
          "most lines in a Batch API file (OpenAI's limit is 50,000)");
ABSL_FLAG(int64_t, max_upload_mib, 4096,
          "largest UploadDataset, in MiB of JSON lines (0: no limit)");
ABSL_FLAG(int64_t, tenant_storage_quota_mib, 0,
          "MiB one tenant may hold in the store: uploads, its jobs' datasets "
          "and results (0: no quota)");
ABSL_FLAG(std::string, on_shutdown, "suspend",
          "after --shutdown_grace: suspend running jobs (they resume on the "
          "next start) or cancel them");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain for the gRPC port (with --tls_key: TLS); "
          "re-read when it changes");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: clients must present a certificate it signed "
          "(mTLS)");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Minutes(1),
          "how often the TLS files are checked for a new certificate");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "lines 'TENANT sha256:HEX' (the SHA-256 of each tenant's token); "
          "callers send 'authorization: Bearer TOKEN'; re-read when it "
          "changes (empty: no authentication, one shared tenant)");
ABSL_FLAG(std::string, admin_tenant, "admin",
          "the tenant (in --auth_tokens_file) that sees and cancels every "
          "tenant's jobs");
ABSL_FLAG(int, tenant_max_jobs, 0,
          "jobs one tenant runs at once; more wait in the queue (0: "
          "--max_jobs)");
ABSL_FLAG(int, tenant_max_queued_jobs, 0,
          "jobs one tenant has waiting; beyond, RESOURCE_EXHAUSTED (0: "
          "--max_queued_jobs)");
ABSL_FLAG(int64_t, tenant_max_enqueued_tokens, 0,
          "prompt tokens one tenant's queued and running jobs hold together "
          "(at 4 bytes a token of their prompts), as Azure's and LiteLLM's "
          "enqueued-token limits; a job that would pass it is "
          "RESOURCE_EXHAUSTED (0: no limit)");
ABSL_FLAG(bool, reflection, true,
          "serve gRPC reflection (grpcurl list/describe) to every caller");
ABSL_FLAG(int, max_request_mib, 256,
          "largest GenerateJob request (the inline dataset), in MiB");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "check every mutex acquisition for lock-order cycles (Abseil's "
          "deadlock detector: for debugging a hang; slow)");

namespace {

constexpr char kUsage[] =
    "sdgd --backend NAME=URL[,URL...] [--backend ...] [flags]\n"
    "Runs synthetic-data generation jobs against OpenAI-compatible servers.\n"
    "Repeatable per-backend flags (NAME=VALUE for one backend, VALUE for "
    "all):\n"
    "  --backend NAME=URL[,URL...]  the OpenAI base URL ending in /v1; "
    "several\n"
    "      URLs share the load (fewest in flight first); the first backend is\n"
    "      the default for blocks that name none.\n"
    "  --backend_batching [NAME=]auto|on|off  one /completions request per\n"
    "      shard with its prompts as a list; auto: when /v1/models says vLLM.\n"
    "      (default auto)\n"
    "  --backend_max_in_flight [NAME=]N|auto|adaptive  requests in flight per\n"
    "      endpoint; auto: llama.cpp's slot count from /props, else 256;\n"
    "      adaptive: an AIMD limit in [1, 1024]. (default auto)\n"
    "  --backend_api_key_file NAME=PATH  sent as Authorization: Bearer; or\n"
    "      set SDG_BACKEND_API_KEY_<NAME>.\n"
    "  --backend_rate_limit [NAME=]rpm:N,tpm:N,itpm:N,otpm:N  a hosted API's\n"
    "      requests, tokens, input and output tokens a minute (any of them):\n"
    "      requests are paced to stay within them. (default none)";

// --store or the file --store_url_file names; "" for neither.
absl::StatusOr<std::string> DatabaseFromFlags() {
  const std::string flag = absl::GetFlag(FLAGS_store);
  const std::string path = absl::GetFlag(FLAGS_store_url_file);
  if (!flag.empty() && !path.empty()) {
    return absl::InvalidArgumentError(
        "--store and --store_url_file both name the store; give one");
  }
  if (!flag.empty()) {
    if (absl::Status s = sdg::pg::CheckConninfo(flag); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--store: ", s.message()));
    }
    if (sdg::pg::ConninfoHasPassword(flag)) {
      return absl::InvalidArgumentError(
          "--store holds a password, which ps and logs would show; put the "
          "URL in a file named by --store_url_file, or the password in "
          "PGPASSWORD or a PGPASSFILE");
    }
    return flag;
  }
  if (path.empty()) return std::string();
  std::ifstream in(path);
  std::string url;
  if (!in || !std::getline(in, url)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--store_url_file ", path, ": cannot read a line from it"));
  }
  while (!url.empty() && (url.back() == '\r' || url.back() == ' ')) {
    url.pop_back();
  }
  if (absl::Status s = sdg::pg::CheckConninfo(url); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--store_url_file ", path, ": ", s.message()));
  }
  return url;
}

absl::StatusOr<sdg::ServerOptions> OptionsFromFlags(
    sdg::BackendFlags backend_flags) {
  sdg::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_mib) << 20;
  options.scheduler.max_workers = absl::GetFlag(FLAGS_max_workers);
  options.scheduler.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.scheduler.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs);
  options.scheduler.tenant_max_jobs = absl::GetFlag(FLAGS_tenant_max_jobs);
  options.scheduler.tenant_max_queued_jobs =
      absl::GetFlag(FLAGS_tenant_max_queued_jobs);
  options.scheduler.tenant_max_enqueued_tokens =
      absl::GetFlag(FLAGS_tenant_max_enqueued_tokens);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.tls.refresh_interval = absl::GetFlag(FLAGS_tls_refresh_interval);
  options.auth.tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  options.auth.admin_tenant = absl::GetFlag(FLAGS_admin_tenant);
  options.reflection = absl::GetFlag(FLAGS_reflection);
  options.http.connect_timeout = absl::GetFlag(FLAGS_backend_connect_timeout);
  options.http.request_timeout = absl::GetFlag(FLAGS_backend_request_timeout);
  options.service.job_retention = absl::GetFlag(FLAGS_job_retention);
  options.service.data_root = absl::GetFlag(FLAGS_data_root);
  options.service.data_root_shared = absl::GetFlag(FLAGS_data_root_shared);
  if (absl::StrContains(options.service.data_root_shared, "/") ||
      options.service.data_root_shared == "." ||
      options.service.data_root_shared == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_root_shared must name one folder under --data_root, got \"",
        options.service.data_root_shared, "\""));
  }
  options.service.max_upload_bytes =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_max_upload_mib)) << 20;
  options.openai_listen = absl::GetFlag(FLAGS_openai_listen);
  options.service.limits.batch_completion_window =
      absl::GetFlag(FLAGS_openai_completion_window);
  if (options.service.limits.batch_completion_window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--openai_completion_window must be positive");
  }
  options.batch.max_file_bytes =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_openai_max_file_mib)) << 20;
  options.batch.max_file_lines =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_openai_max_file_lines));
  options.service.tenant_storage_quota_bytes =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_tenant_storage_quota_mib)) << 20;
  if (options.service.tenant_storage_quota_bytes > 0 &&
      absl::GetFlag(FLAGS_ephemeral)) {
    return absl::InvalidArgumentError(
        "--tenant_storage_quota_mib needs the durable store: --ephemeral "
        "keeps nothing on disk");
  }
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.ephemeral = absl::GetFlag(FLAGS_ephemeral);
  absl::StatusOr<std::string> database = DatabaseFromFlags();
  if (!database.ok()) return database.status();
  options.database = *std::move(database);
  options.replica_lease = absl::GetFlag(FLAGS_replica_lease);
  if (options.replica_lease < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "--replica_lease must be at least 1s (renewed every third of it)");
  }
  if (!options.database.empty() && options.ephemeral) {
    return absl::InvalidArgumentError(
        "--ephemeral keeps jobs in memory; it cannot be given with --store");
  }
  options.store_outage_limit =
      std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_store_outage_limit));
  const std::string on_shutdown = absl::GetFlag(FLAGS_on_shutdown);
  if (on_shutdown == "suspend") {
    options.on_shutdown = sdg::ServerOptions::OnShutdown::kSuspend;
  } else if (on_shutdown == "cancel") {
    options.on_shutdown = sdg::ServerOptions::OnShutdown::kCancel;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--on_shutdown must be suspend or cancel, got \"", on_shutdown, "\""));
  }
  options.service.limits.default_num_workers = sdg::DefaultNumWorkers();
  options.service.limits.max_prompt_bytes = static_cast<size_t>(
      std::max<int64_t>(1, absl::GetFlag(FLAGS_max_prompt_bytes)));
  options.service.limits.max_shard_prompt_bytes = static_cast<size_t>(
      std::max<int64_t>(1, absl::GetFlag(FLAGS_max_shard_prompt_bytes)));
  backend_flags.defaults.retry.max_attempts =
      absl::GetFlag(FLAGS_backend_max_attempts);
  backend_flags.defaults.outage.limit =
      std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_backend_outage_limit));
  absl::StatusOr<std::vector<sdg::BackendOptions>> backends =
      sdg::BackendsFromFlags(backend_flags, sdg::EnvironmentVariable);
  if (!backends.ok()) return backends.status();
  options.backends = *std::move(backends);
  return options;
}

// Parses the command line into the server's options. The log level and the
// mutex checks take effect here, before any job runs.
absl::StatusOr<sdg::ServerOptions> OptionsFromCommandLine(int argc,
                                                          char** argv) {
  std::vector<char*> args(argv, argv + argc);
  sdg::BackendFlags backend_flags;
  backend_flags.backend = sdg::TakeRepeatedFlag("backend", args);
  backend_flags.batching = sdg::TakeRepeatedFlag("backend_batching", args);
  backend_flags.max_in_flight =
      sdg::TakeRepeatedFlag("backend_max_in_flight", args);
  backend_flags.api_key_file =
      sdg::TakeRepeatedFlag("backend_api_key_file", args);
  backend_flags.rate_limit = sdg::TakeRepeatedFlag("backend_rate_limit", args);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  sdg::LogLevel level;
  if (!sdg::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    return absl::InvalidArgumentError(
        "--log_level must be debug, info, warning or error");
  }
  sdg::SetLogLevel(level);
  // Debian's Abseil checks every acquisition against one global graph of
  // every mutex ever locked (a Job has one): with tens of thousands of jobs
  // that serializes the server. The unit and integration tests, which run
  // the same locks in-process, keep it on.
  absl::SetMutexDeadlockDetectionMode(
      absl::GetFlag(FLAGS_mutex_deadlock_detection)
          ? absl::OnDeadlockCycle::kAbort
          : absl::OnDeadlockCycle::kIgnore);
  return OptionsFromFlags(std::move(backend_flags));
}

// Says where the server listens (stdout, which scripts and tests read) and
// how it is set up (the log).
void AnnounceStarted(const sdg::ServerOptions& options,
                     const sdg::Server& server) {
  std::string host = options.listen.substr(0, options.listen.rfind(':'));
  std::string metrics_host =
      options.metrics_listen.substr(0, options.metrics_listen.rfind(':'));
  std::printf("sdgd listening on %s:%d\n", host.c_str(), server.port());
  std::printf("sdgd metrics on %s:%d\n", metrics_host.c_str(),
              server.metrics_port());
  if (server.openai_port() != 0) {
    std::printf(
        "sdgd Batch API on %s:%d\n",
        options.openai_listen.substr(0, options.openai_listen.rfind(':'))
            .c_str(),
        server.openai_port());
  }
  std::fflush(stdout);
  sdg::Log(
      sdg::LogLevel::kInfo, "sdgd started",
      {{"port", server.port()},
       {"metrics_port", server.metrics_port()},
       {"backends", options.backends.size()},
       {"max_workers", options.scheduler.max_workers},
       {"store", options.ephemeral           ? "memory (--ephemeral)"
                 : !options.database.empty() ? "postgresql"
                                             : "sqlite " + options.state_dir},
       {"tls", !options.tls.enabled() ? "off"
               : options.tls.mutual() ? "mtls"
                                      : "tls"},
       {"auth", options.auth.tokens_file.empty() ? "off" : "tokens"},
       {"reflection", options.reflection},
       {"jobs_resumed", server.resumed_jobs()}});
}

}  // namespace

int main(int argc, char** argv) {
  sdg::ReturnLargeAllocationsToTheSystem();
  // A write past the file-size limit (ulimit -f) fails with EFBIG, which the
  // store reports and retries as it does a full disk, instead of ending
  // the process.
  std::signal(SIGXFSZ, SIG_IGN);
  absl::SetProgramUsageMessage(kUsage);
  // The first signal, or another replica taking this one's lease over,
  // asks for the shutdown (once).
  absl::Notification shutdown_requested;
  std::once_flag shutdown_once;
  auto request_shutdown = [&] {
    std::call_once(shutdown_once, [&] { shutdown_requested.Notify(); });
  };
  std::atomic<bool> lease_lost{false};
  sdg::Server* running = nullptr;
  absl::Mutex running_mu;
  // Before any other thread exists, so that every thread inherits the mask.
  sdg::SignalWatcher signals([&](int count) {
    if (count == 1) {
      request_shutdown();
      return;
    }
    absl::MutexLock lock(&running_mu);
    if (running != nullptr) running->StopJobsNow("second signal");
  });

  absl::StatusOr<sdg::ServerOptions> options =
      OptionsFromCommandLine(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "sdgd: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  options->stop_waiting = &shutdown_requested;
  options->on_lease_lost = [&](const absl::Status&) {
    lease_lost = true;
    request_shutdown();
  };
  absl::StatusOr<std::unique_ptr<sdg::Server>> server =
      sdg::Server::Create(*options);
  if (!server.ok() && absl::IsCancelled(server.status()) &&
      shutdown_requested.HasBeenNotified()) {
    sdg::Log(sdg::LogLevel::kInfo, "sdgd stopped while a standby");
    curl_global_cleanup();
    return 0;
  }
  if (!server.ok()) {
    std::fprintf(stderr, "sdgd: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  AnnounceStarted(*options, **server);
  {
    absl::MutexLock lock(&running_mu);
    running = server->get();
  }

  shutdown_requested.WaitForNotification();
  // A replica whose lease was taken over stops at once: its jobs run on
  // the replica that took it, and nothing it writes would commit.
  (*server)->Shutdown(lease_lost ? absl::ZeroDuration()
                                 : absl::GetFlag(FLAGS_shutdown_grace));
  {
    absl::MutexLock lock(&running_mu);
    running = nullptr;
  }
  server->reset();
  curl_global_cleanup();
  if (lease_lost) {
    std::fprintf(stderr,
                 "sdgd: another replica took over the replica lease; this "
                 "one stopped (started again, it waits as a standby)\n");
    return 1;
  }
  return 0;
}
