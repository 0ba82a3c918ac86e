#include "server/observability/metrics_server.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <pthread.h>

#include <cstring>

#include "server/observability/http_listener.h"

namespace sdg {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Create(
    const std::string& listen, const Metrics& metrics) {
  // Lets the destructor stop the loop from another thread.
  static const int threads_ready = evthread_use_pthreads();
  if (threads_ready != 0) {
    return absl::InternalError("evthread_use_pthreads failed");
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer(metrics));
  server->base_ = event_base_new();
  server->http_ = server->base_ ? evhttp_new(server->base_) : nullptr;
  if (server->http_ == nullptr) {
    return absl::InternalError("libevent setup failed");
  }
  absl::StatusOr<int> port = BindHttpServer(
      server->http_, server->base_, listen, "--metrics_listen", "metrics");
  if (!port.ok()) return port.status();
  server->port_ = *port;
  evhttp_set_allowed_methods(server->http_, EVHTTP_REQ_GET);
  evhttp_set_gencb(server->http_, &MetricsServer::OnRequest, server.get());
  server->thread_ = std::thread([base = server->base_] {
    // Keeps the loop alive while nothing else is scheduled.
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
  });
  pthread_setname_np(server->thread_.native_handle(), "sdg-metrics");
  return server;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    event_base_loopexit(base_, nullptr);
    thread_.join();
  }
  if (http_ != nullptr) evhttp_free(http_);
  if (base_ != nullptr) event_base_free(base_);
}

void MetricsServer::OnRequest(evhttp_request* request, void* arg) {
  auto* self = static_cast<MetricsServer*>(arg);
  const char* path =
      evhttp_uri_get_path(evhttp_request_get_evhttp_uri(request));
  if (path == nullptr) path = "";
  int code = 200;
  std::string body;
  const char* content_type = "text/plain; charset=utf-8";
  if (std::strcmp(path, "/metrics") == 0) {
    body = self->metrics_.Serialize();
    content_type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (std::strcmp(path, "/healthz") == 0) {
    body = "ok\n";
  } else if (std::strcmp(path, "/readyz") == 0) {
    const bool ready = self->ready_.load();
    const bool store_up = self->store_up_.load();
    code = ready && store_up ? 200 : 503;
    body = !ready     ? "shutting down\n"
           : store_up ? "ready\n"
                      : "the job store cannot commit (see the log)\n";
  } else {
    evhttp_send_error(request, 404, "try /metrics, /healthz or /readyz");
    return;
  }
  evhttp_add_header(evhttp_request_get_output_headers(request), "Content-Type",
                    content_type);
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(request, code, code == 200 ? "OK" : "Service Unavailable",
                    out);
  evbuffer_free(out);
}

}  // namespace sdg
