#include "tests/llmsim/sim_server.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sdg::llmsim {

struct SimServer::Pending {
  SimServer* server;
  evhttp_request* request;
  evhttp_connection* connection;
  event* timer;
  SimReply reply;
  // evhttp does not read a connection while its request is being answered,
  // so it would not notice the client leaving; this watches the socket.
  event* peer_watch = nullptr;

  ~Pending() {
    event_free(timer);
    if (peer_watch != nullptr) event_free(peer_watch);
  }
};

absl::StatusOr<std::unique_ptr<SimServer>> SimServer::Create(
    const Options& options) {
  static const int threads_ready = evthread_use_pthreads();
  if (threads_ready != 0)
    return absl::InternalError("evthread_use_pthreads failed");

  size_t colon = options.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(options.listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen must be HOST:PORT, got ", options.listen));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, options.listen.substr(0, colon).c_str(),
                &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen host must be an IPv4 address, got ", options.listen));
  }

  std::unique_ptr<SimServer> server(new SimServer(options));
  server->base_ = event_base_new();
  server->http_ = evhttp_new(server->base_);
  if (server->base_ == nullptr || server->http_ == nullptr) {
    return absl::InternalError("libevent setup failed");
  }
  // A deep backlog: hundreds of clients may connect at once.
  evconnlistener* listener = evconnlistener_new_bind(
      server->base_, nullptr, nullptr,
      LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 4096,
      reinterpret_cast<sockaddr*>(&address), sizeof(address));
  if (listener == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.listen, ": ", std::strerror(errno)));
  }
  evhttp_bind_listener(server->http_, listener);
  sockaddr_in bound{};
  socklen_t length = sizeof(bound);
  getsockname(evconnlistener_get_fd(listener),
              reinterpret_cast<sockaddr*>(&bound), &length);
  server->port_ = ntohs(bound.sin_port);

  evhttp_set_allowed_methods(server->http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
  evhttp_set_max_body_size(server->http_, 64 << 20);
  evhttp_set_gencb(server->http_, &SimServer::OnRequest, server.get());
  server->sigint_ =
      evsignal_new(server->base_, SIGINT, &SimServer::OnSignal, server.get());
  server->sigterm_ =
      evsignal_new(server->base_, SIGTERM, &SimServer::OnSignal, server.get());
  return server;
}

SimServer::SimServer(const Options& options)
    : options_(options),
      simulator_{options.model},
      fault_random_(options.fault_seed) {}

SimServer::~SimServer() {
  for (auto& [connection, pendings] : pending_) {
    for (Pending* pending : pendings) delete pending;
  }
  pending_.clear();  // evhttp_free below runs OnConnectionClosed
  if (sigint_ != nullptr) event_free(sigint_);
  if (sigterm_ != nullptr) event_free(sigterm_);
  if (http_ != nullptr) evhttp_free(http_);
  if (base_ != nullptr) event_base_free(base_);
}

void SimServer::Run() {
  event_add(sigint_, nullptr);
  event_add(sigterm_, nullptr);
  event_base_dispatch(base_);
}

void SimServer::Stop() { event_base_loopexit(base_, nullptr); }

void SimServer::OnSignal(int, short, void* self) {
  static_cast<SimServer*>(self)->Stop();
}

void SimServer::OnRequest(evhttp_request* request, void* self) {
  static_cast<SimServer*>(self)->Handle(request);
}

void SimServer::Handle(evhttp_request* request) {
  std::string path =
      evhttp_uri_get_path(evhttp_request_get_evhttp_uri(request))
          ? evhttp_uri_get_path(evhttp_request_get_evhttp_uri(request))
          : "";
  evhttp_cmd_type method = evhttp_request_get_command(request);
  evbuffer* input = evhttp_request_get_input_buffer(request);
  std::string body(evbuffer_get_length(input), '\0');
  evbuffer_copyout(input, body.data(), body.size());

  SimReply reply;
  bool simulated = false;
  if (path == "/stats" && method == EVHTTP_REQ_GET) {
    reply = {200, StatsJson(), 0};
  } else if (path == "/health" && method == EVHTTP_REQ_GET) {
    reply = {200, "{}", 0};
  } else if (path == "/v1/models" && method == EVHTTP_REQ_GET) {
    reply = simulator_.Models();
  } else if (path == "/v1/completions" && method == EVHTTP_REQ_POST) {
    reply = simulator_.Completions(body);
    simulated = true;
  } else if (path == "/v1/chat/completions" && method == EVHTTP_REQ_POST) {
    reply = simulator_.ChatCompletions(body);
    simulated = true;
  } else {
    reply = {404, ErrorBody(404, absl::StrCat("no route for ", path)), 0};
  }
  if (simulated) {
    ++stats_.requests;
    double draw = std::uniform_real_distribution<double>(0, 1)(fault_random_);
    if (draw < options_.fail_rate) {
      reply = {options_.fail_code,
               ErrorBody(options_.fail_code, "simulated failure"), 0};
      if (options_.retry_after_s > 0) {
        evhttp_add_header(evhttp_request_get_output_headers(request),
                          "Retry-After",
                          std::to_string(options_.retry_after_s).c_str());
      }
    } else if (draw < options_.fail_rate + options_.hang_rate) {
      ++stats_.hung;
      ReplyLater(request, std::move(reply), std::nullopt);
      return;
    } else if (options_.latency_ms > 0) {
      ReplyLater(request, std::move(reply), options_.latency_ms);
      return;
    }
  }
  ++stats_.in_flight;
  stats_.max_in_flight = std::max(stats_.max_in_flight, stats_.in_flight);
  stats_.prompts += reply.prompts;
  Reply(request, reply.status, reply.body);
}

void SimServer::Reply(evhttp_request* request, int status,
                      const std::string& body) {
  --stats_.in_flight;
  ++stats_.by_status[status];
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  evhttp_add_header(headers, "Content-Type", "application/json");
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(request, status, status == 200 ? "OK" : "Error", out);
  evbuffer_free(out);
}

void SimServer::ReplyLater(evhttp_request* request, SimReply reply,
                           std::optional<int> latency_ms) {
  ++stats_.in_flight;
  stats_.max_in_flight = std::max(stats_.max_in_flight, stats_.in_flight);
  auto* pending =
      new Pending{this, request, evhttp_request_get_connection(request),
                  nullptr, std::move(reply)};
  pending->timer = evtimer_new(base_, &SimServer::OnTimer, pending);
  if (latency_ms.has_value()) {  // otherwise it hangs until the client leaves
    timeval delay{*latency_ms / 1000, (*latency_ms % 1000) * 1000};
    evtimer_add(pending->timer, &delay);
  }
  pending_[pending->connection].insert(pending);
  evhttp_connection_set_closecb(pending->connection,
                                &SimServer::OnConnectionClosed, this);
  int fd =
      bufferevent_getfd(evhttp_connection_get_bufferevent(pending->connection));
  pending->peer_watch =
      event_new(base_, fd, EV_READ, &SimServer::OnPeerReadable, pending);
  event_add(pending->peer_watch, nullptr);
}

void SimServer::OnPeerReadable(int fd, short, void* arg) {
  auto* pending = static_cast<Pending*>(arg);
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    evhttp_connection* connection = pending->connection;
    pending->server->DropPending(connection);
    evhttp_connection_free(connection);
  }
  // Data means a pipelined request: evhttp reads it after this reply.
}

void SimServer::DropPending(evhttp_connection* connection) {
  auto it = pending_.find(connection);
  if (it == pending_.end()) return;
  for (Pending* pending : it->second) {
    ++stats_.closed_by_client;
    --stats_.in_flight;
    delete pending;  // evhttp frees the request with its connection
  }
  pending_.erase(it);
}
void SimServer::OnTimer(int, short, void* arg) {
  auto* pending = static_cast<Pending*>(arg);
  SimServer* self = pending->server;
  auto it = self->pending_.find(pending->connection);
  it->second.erase(pending);
  if (it->second.empty()) self->pending_.erase(it);
  self->stats_.prompts += pending->reply.prompts;
  self->Reply(pending->request, pending->reply.status, pending->reply.body);
  delete pending;
}

void SimServer::OnConnectionClosed(evhttp_connection* connection, void* arg) {
  auto* self = static_cast<SimServer*>(arg);
  auto it = self->pending_.find(connection);
  if (it == self->pending_.end()) return;
  // libevent detached these requests from the dead connection; sending a
  // reply frees them.
  for (Pending* pending : it->second) {
    evhttp_send_reply(pending->request, 499, "Client Closed Request", nullptr);
  }
  self->DropPending(connection);
}

std::string SimServer::StatsJson() const {
  nlohmann::json by_status = nlohmann::json::object();
  for (const auto& [status, count] : stats_.by_status) {
    by_status[std::to_string(status)] = count;
  }
  return nlohmann::json{{"requests", stats_.requests},
                        {"by_status", by_status},
                        {"in_flight", stats_.in_flight},
                        {"max_in_flight", stats_.max_in_flight},
                        {"prompts", stats_.prompts},
                        {"closed_by_client", stats_.closed_by_client},
                        {"hung", stats_.hung}}
      .dump();
}

}  // namespace sdg::llmsim
