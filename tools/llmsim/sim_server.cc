#include "tools/llmsim/sim_server.h"

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
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sdg::llmsim {

struct SimServer::Pending {
  enum class State { kHeld, kWaitingForSlot, kInService, kTrickling, kDone };

  SimServer* server;
  evhttp_request* request;
  evhttp_connection* connection;
  event* timer;
  SimReply reply;
  Fault fault = Fault::kNone;
  State state = State::kHeld;
  size_t bytes_sent = 0;  // of a slow body
  // evhttp does not read a connection while its request is being answered,
  // so it would not notice the client leaving; this watches the socket.
  event* peer_watch = nullptr;

  ~Pending() {
    event_free(timer);
    if (peer_watch != nullptr) event_free(peer_watch);
  }
};

absl::StatusOr<std::vector<SimServer::ScriptStep>> SimServer::ParseFaultScript(
    const std::string& script) {
  std::vector<ScriptStep> steps;
  if (script.empty()) return steps;
  for (absl::string_view word : absl::StrSplit(script, ',')) {
    ScriptStep step;
    if (word == "ok") {
    } else if (word == "hang") {
      step.fault = Fault::kHang;
    } else if (word == "reset") {
      step.fault = Fault::kReset;
    } else if (word == "malformed") {
      step.fault = Fault::kMalformed;
    } else if (word == "slow") {
      step.fault = Fault::kSlowBody;
    } else if (!absl::SimpleAtoi(word, &step.fail_status) ||
               step.fail_status < 400 || step.fail_status > 599) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fault_script: unknown step \"", word,
          "\"; use ok, hang, reset, malformed, slow or an HTTP status "
          "400-599"));
    }
    steps.push_back(step);
  }
  return steps;
}

absl::StatusOr<std::unique_ptr<SimServer>> SimServer::Create(
    const Options& options) {
  static const int threads_ready = evthread_use_pthreads();
  if (threads_ready != 0)
    return absl::InternalError("evthread_use_pthreads failed");
  absl::StatusOr<std::vector<ScriptStep>> script =
      ParseFaultScript(options.fault_script);
  if (!script.ok()) return script.status();
  std::shared_ptr<const ReplyBook> replies;
  if (!options.replies_file.empty()) {
    absl::StatusOr<ReplyBook> book = ReplyBook::Load(options.replies_file);
    if (!book.ok()) return book.status();
    replies = std::make_shared<const ReplyBook>(*std::move(book));
  }

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

  // A client that hangs up while a reply is written (sdgd cancelling a
  // request) must not end the process with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<SimServer> server(new SimServer(options, std::move(replies)));
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
  if (options.mode == Mode::kLlamaCpp) {
    // An idle keep-alive connection is closed after this, freeing its thread.
    timeval keep_alive{options.keep_alive_ms / 1000,
                       (options.keep_alive_ms % 1000) * suseconds_t{1000}};
    evhttp_set_timeout_tv(server->http_, &keep_alive);
  }
  server->sigint_ =
      evsignal_new(server->base_, SIGINT, &SimServer::OnSignal, server.get());
  server->sigterm_ =
      evsignal_new(server->base_, SIGTERM, &SimServer::OnSignal, server.get());
  server->fault_script_ = *std::move(script);
  return server;
}

SimServer::SimServer(const Options& options,
                     std::shared_ptr<const ReplyBook> replies)
    : options_(options),
      simulator_{options.model,
                 options.mode == Mode::kVllm       ? "vllm"
                 : options.mode == Mode::kLlamaCpp ? "llamacpp"
                                                   : "system",
                 options.mode != Mode::kLlamaCpp,
                 std::move(replies),
                 /*one_choice_per_request=*/options.mode == Mode::kLlamaCpp,
                 /*serves_any_model_name=*/options.mode == Mode::kLlamaCpp,
                 /*samples_follow_seed=*/options.mode == Mode::kLlamaCpp},
      started_(std::chrono::steady_clock::now()),
      fault_random_(options.fault_seed) {
  for (auto [bucket, limit] : {std::pair{&requests_bucket_, options.rpm},
                               std::pair{&tokens_bucket_, options.tpm}}) {
    bucket->per_second = static_cast<double>(limit) / 60;
    bucket->capacity = bucket->per_second * options.rate_window_s;
    bucket->level = bucket->capacity;
    bucket->refilled = started_;
  }
}

void SimServer::RateBucket::Refill(std::chrono::steady_clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - refilled).count();
  level = std::min(capacity, level + per_second * seconds);
  refilled = now;
}

bool SimServer::AdmitByRateLimits(evhttp_request* request,
                                  const SimReply& reply) {
  if (options_.rpm <= 0 && options_.tpm <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  const double tokens =
      static_cast<double>(reply.prompt_tokens + reply.completion_tokens);
  struct Limit {
    const char* name;
    int64_t limit;
    RateBucket* bucket;
    double cost;
  };
  const Limit limits[] = {{"requests", options_.rpm, &requests_bucket_, 1},
                          {"tokens", options_.tpm, &tokens_bucket_, tokens}};
  const Limit* short_of = nullptr;
  for (const Limit& limit : limits) {
    if (limit.limit <= 0) continue;
    limit.bucket->Refill(now);
    if (limit.bucket->level < limit.cost && short_of == nullptr) {
      short_of = &limit;
    }
  }
  if (short_of == nullptr) {
    for (const Limit& limit : limits) {
      if (limit.limit > 0) limit.bucket->level -= limit.cost;
    }
  }
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  for (const Limit& limit : limits) {
    if (limit.limit <= 0 || !options_.rate_limit_headers) continue;
    const RateBucket& bucket = *limit.bucket;
    // OpenAI's reset: how long until the bucket is full again, e.g. "1.5s".
    const double reset_s = (bucket.capacity - bucket.level) / bucket.per_second;
    evhttp_add_header(headers,
                      absl::StrCat("x-ratelimit-limit-", limit.name).c_str(),
                      absl::StrCat(limit.limit).c_str());
    evhttp_add_header(
        headers, absl::StrCat("x-ratelimit-remaining-", limit.name).c_str(),
        absl::StrCat(static_cast<int64_t>(std::max(0.0, bucket.level)))
            .c_str());
    evhttp_add_header(headers,
                      absl::StrCat("x-ratelimit-reset-", limit.name).c_str(),
                      absl::StrFormat("%.3fs", reset_s).c_str());
  }
  if (short_of == nullptr) return true;
  Reply(
      request, 429,
      nlohmann::json{
          {"error",
           {{"message",
             absl::StrFormat("Rate limit reached for %s per min (RPM/TPM): "
                             "Limit %d, Requested %.0f. Please try again "
                             "in %.0fms.",
                             short_of->name, short_of->limit, short_of->cost,
                             1000 * (short_of->cost - short_of->bucket->level) /
                                 short_of->bucket->per_second)},
            {"type", short_of->name},
            {"param", nullptr},
            {"code", "rate_limit_exceeded"}}}}
          .dump(),
      true);
  return false;
}

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

int SimServer::Capacity() const {
  return options_.mode == Mode::kLlamaCpp ? options_.slots : options_.capacity;
}

int SimServer::HttpThreads() const {
  if (options_.mode != Mode::kLlamaCpp) return 0;  // no limit
  return options_.http_threads > 0 ? options_.http_threads : options_.slots + 2;
}

bool SimServer::Loading() const {
  return options_.mode == Mode::kLlamaCpp && !loading_ended_ &&
         std::chrono::steady_clock::now() - started_ <
             std::chrono::milliseconds(options_.loading_ms);
}

void SimServer::Handle(evhttp_request* request) {
  const char* stats_path =
      evhttp_uri_get_path(evhttp_request_get_evhttp_uri(request));
  if (stats_path != nullptr && std::strcmp(stats_path, "/stats") == 0) {
    // The tests' window into llmsim, not part of the server it imitates.
    Serve(request);
    return;
  }
  evhttp_connection* connection = evhttp_request_get_connection(request);
  if (connections_.insert(connection).second) {
    ++stats_.connections_open;
    stats_.max_connections_open =
        std::max(stats_.max_connections_open, stats_.connections_open);
    evhttp_connection_set_closecb(connection, &SimServer::OnConnectionClosed,
                                  this);
  }
  if (HttpThreads() > 0 && threaded_.count(connection) == 0) {
    if (static_cast<int>(threaded_.size()) >= HttpThreads()) {
      // Every thread holds a connection: this one waits, unread, as a socket
      // waits in cpp-httplib's queue.
      waiting_for_thread_.push_back(request);
      ++stats_.waiting_for_thread;
      stats_.max_waiting_for_thread =
          std::max(stats_.max_waiting_for_thread, stats_.waiting_for_thread);
      return;
    }
    threaded_.insert(connection);
  }
  Serve(request);
}

void SimServer::ReleaseThread(evhttp_connection* connection) {
  // Requests of the closed connection that waited are dropped: sending a
  // reply frees a request whose connection is gone.
  for (auto it = waiting_for_thread_.begin();
       it != waiting_for_thread_.end();) {
    if (evhttp_request_get_connection(*it) == connection) {
      evhttp_send_reply(*it, 499, "Client Closed Request", nullptr);
      it = waiting_for_thread_.erase(it);
      --stats_.waiting_for_thread;
    } else {
      ++it;
    }
  }
  if (threaded_.erase(connection) == 0 || waiting_for_thread_.empty()) return;
  evhttp_request* next = waiting_for_thread_.front();
  waiting_for_thread_.pop_front();
  --stats_.waiting_for_thread;
  threaded_.insert(evhttp_request_get_connection(next));
  Serve(next);
}

void SimServer::Serve(evhttp_request* request) {
  const char* raw_path =
      evhttp_uri_get_path(evhttp_request_get_evhttp_uri(request));
  std::string path = raw_path != nullptr ? raw_path : "";
  evhttp_cmd_type method = evhttp_request_get_command(request);
  evbuffer* input = evhttp_request_get_input_buffer(request);
  std::string body(evbuffer_get_length(input), '\0');
  evbuffer_copyout(input, body.data(), body.size());

  const bool generation =
      method == EVHTTP_REQ_POST &&
      (path == "/v1/completions" || path == "/v1/chat/completions" ||
       path == "/v1/embeddings");
  if (path != "/stats" && Loading()) {
    // llama-server answers everything this way until its model is loaded.
    if (generation) {
      ++stats_.requests;
      ++stats_.in_flight;
    } else if (path == "/v1/models" || path == "/props") {
      ++stats_.discovery_requests;
    }
    Reply(request, 503,
          LlamaCppErrorBody(503, "Loading model", "unavailable_error"),
          generation);
    return;
  }
  if (!options_.api_key.empty() && (generation || path == "/v1/models")) {
    const char* auth = evhttp_find_header(
        evhttp_request_get_input_headers(request), "Authorization");
    std::string given = auth != nullptr ? auth : "";
    if (given != "Bearer " + options_.api_key) {
      // As OpenAI does, the message shows the key it got.
      absl::string_view key = given;
      absl::ConsumePrefix(&key, "Bearer ");
      Reply(request, 401,
            ErrorBody(401, absl::StrCat("Incorrect API key provided: ", key)),
            false);
      return;
    }
  }
  if (generation) {
    HandleGeneration(
        request, path == "/v1/completions"  ? simulator_.Completions(body)
                 : path == "/v1/embeddings" ? simulator_.Embeddings(body)
                                            : simulator_.ChatCompletions(body));
    return;
  }
  if (method == EVHTTP_REQ_GET && (path == "/v1/models" || path == "/props")) {
    ++stats_.discovery_requests;
  }
  SimReply reply;
  if (path == "/stats" && method == EVHTTP_REQ_GET) {
    reply = {200, StatsJson()};
  } else if (path == "/health" && method == EVHTTP_REQ_GET) {
    reply = {200, "{}"};
  } else if (path == "/v1/models" && method == EVHTTP_REQ_GET) {
    reply = simulator_.Models();
  } else if (path == "/props" && method == EVHTTP_REQ_GET &&
             options_.mode == Mode::kLlamaCpp) {
    reply = simulator_.Props(options_.slots);
  } else if (path == "/tokenize" && method == EVHTTP_REQ_POST &&
             options_.mode != Mode::kOpenAi) {
    ++stats_.tokenize_requests;
    reply = simulator_.Tokenize(body);
  } else if (path == "/apply-template" && method == EVHTTP_REQ_POST &&
             options_.mode == Mode::kLlamaCpp) {
    ++stats_.tokenize_requests;
    reply = simulator_.ApplyTemplate(body);
  } else {
    reply = {404, ErrorBody(404, absl::StrCat("no route for ", path))};
  }
  Reply(request, reply.status, reply.body, false);
}

SimServer::Fault SimServer::DrawFault(evhttp_request* request,
                                      SimReply& reply) {
  if (next_script_step_ < fault_script_.size()) {
    const ScriptStep& step = fault_script_[next_script_step_++];
    if (step.fail_status != 0) {
      reply = {step.fail_status,
               ErrorBody(step.fail_status, "simulated failure")};
    }
    return step.fault;
  }
  double draw = std::uniform_real_distribution<double>(0, 1)(fault_random_);
  double bound = options_.fail_rate;
  if (draw < bound) {
    reply = {options_.fail_code,
             ErrorBody(options_.fail_code, "simulated failure")};
    if (options_.retry_after_s > 0) {
      evhttp_add_header(evhttp_request_get_output_headers(request),
                        "Retry-After",
                        std::to_string(options_.retry_after_s).c_str());
    }
    return Fault::kNone;
  }
  for (auto [rate, fault] :
       {std::pair{options_.hang_rate, Fault::kHang},
        std::pair{options_.reset_rate, Fault::kReset},
        std::pair{options_.malformed_rate, Fault::kMalformed},
        std::pair{options_.slow_body_rate, Fault::kSlowBody}}) {
    bound += rate;
    if (draw < bound) return fault;
  }
  return Fault::kNone;
}

void SimServer::HandleGeneration(evhttp_request* request, SimReply reply) {
  ++stats_.requests;
  if (stats_.arrivals_ms.size() < kMaxArrivals) {
    stats_.arrivals_ms.push_back(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - started_)
            .count());
  }
  ++stats_.in_flight;
  stats_.max_in_flight = std::max(stats_.max_in_flight, stats_.in_flight);
  Fault fault = DrawFault(request, reply);
  if (reply.status != 200) {  // a bad request or a simulated failure
    Reply(request, reply.status, reply.body, true);
    return;
  }
  if (!AdmitByRateLimits(request, reply)) return;
  if (Capacity() > 0 && in_service_ >= Capacity() && options_.busy_status > 0 &&
      fault != Fault::kHang) {
    Reply(
        request, options_.busy_status,
        ErrorBody(options_.busy_status, "all slots are busy; try again later"),
        true);
    return;
  }

  auto* pending = new Pending{
      this,    request,          evhttp_request_get_connection(request),
      nullptr, std::move(reply), fault};
  pending->timer = evtimer_new(base_, &SimServer::OnTimer, pending);
  pending_[pending->connection].insert(pending);
  evhttp_connection_set_closecb(pending->connection,
                                &SimServer::OnConnectionClosed, this);
  int fd =
      bufferevent_getfd(evhttp_connection_get_bufferevent(pending->connection));
  pending->peer_watch =
      event_new(base_, fd, EV_READ, &SimServer::OnPeerReadable, pending);
  event_add(pending->peer_watch, nullptr);

  if (fault == Fault::kHang) {
    ++stats_.hung;  // no timer: it waits until the client leaves
    return;
  }
  Admit(pending);
}

void SimServer::Admit(Pending* pending) {
  if (Capacity() > 0 && in_service_ >= Capacity()) {
    pending->state = Pending::State::kWaitingForSlot;
    waiting_for_slot_.push_back(pending);
    ++stats_.queued;
    stats_.max_queued = std::max(stats_.max_queued, stats_.queued);
    return;
  }
  StartService(pending);
}

void SimServer::StartService(Pending* pending) {
  pending->state = Pending::State::kInService;
  ++in_service_;
  int64_t ms = options_.latency_ms +
               options_.ms_per_token * pending->reply.completion_tokens;
  timeval delay{static_cast<time_t>(ms / 1000),
                static_cast<suseconds_t>((ms % 1000) * 1000)};
  evtimer_add(pending->timer, &delay);
}

void SimServer::EndService(Pending* pending) {
  if (pending->state != Pending::State::kInService) return;
  pending->state = Pending::State::kDone;
  --in_service_;
  if (!waiting_for_slot_.empty()) {
    Pending* next = waiting_for_slot_.front();
    waiting_for_slot_.pop_front();
    --stats_.queued;
    StartService(next);
  }
}

void SimServer::OnTimer(int, short, void* arg) {
  auto* pending = static_cast<Pending*>(arg);
  if (pending->state == Pending::State::kTrickling) {
    pending->server->SendNextSlowChunk(pending);
  } else {
    pending->server->Deliver(pending);
  }
}

void SimServer::Deliver(Pending* pending) {
  switch (pending->fault) {
    case Fault::kReset:
      ResetConnection(pending);
      return;
    case Fault::kMalformed:
      ++stats_.malformed;
      pending->reply.body = R"({"id":"cmpl-broken","choices":[{"text":"sim)";
      break;
    case Fault::kSlowBody: {
      ++stats_.slow_bodies;
      EndService(pending);
      pending->state = Pending::State::kTrickling;
      evkeyvalq* headers = evhttp_request_get_output_headers(pending->request);
      evhttp_add_header(headers, "Content-Type", "application/json");
      evhttp_send_reply_start(pending->request, 200, "OK");
      SendNextSlowChunk(pending);
      return;
    }
    case Fault::kNone:
    case Fault::kHang:
      break;
  }
  EndService(pending);
  CountAnswered(pending->reply);
  evhttp_request* request = pending->request;
  SimReply reply = std::move(pending->reply);
  Forget(pending);
  Reply(request, reply.status, reply.body, true);
}

void SimServer::SendNextSlowChunk(Pending* pending) {
  constexpr size_t kChunks = 10;
  const std::string& body = pending->reply.body;
  size_t chunk = (body.size() + kChunks - 1) / kChunks;
  size_t offset = pending->bytes_sent;
  if (offset < body.size()) {
    size_t size = std::min(chunk, body.size() - offset);
    evbuffer* out = evbuffer_new();
    evbuffer_add(out, body.data() + offset, size);
    evhttp_send_reply_chunk(pending->request, out);
    evbuffer_free(out);
    pending->bytes_sent += size;
  }
  if (pending->bytes_sent >= body.size()) {
    CountAnswered(pending->reply);
    --stats_.in_flight;
    ++stats_.by_status[200];
    evhttp_request* request = pending->request;
    Forget(pending);
    evhttp_send_reply_end(request);
    return;
  }
  int ms = options_.slow_body_ms / static_cast<int>(kChunks);
  timeval delay{ms / 1000, (ms % 1000) * suseconds_t{1000}};
  evtimer_add(pending->timer, &delay);
}

void SimServer::ResetConnection(Pending* pending) {
  ++stats_.resets;
  --stats_.in_flight;
  EndService(pending);
  evhttp_connection* connection = pending->connection;
  int fd = bufferevent_getfd(evhttp_connection_get_bufferevent(connection));
  // Headers promising more body than is sent, then the connection closes.
  std::string partial =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
      "Content-Length: 4096\r\n\r\n{\"id\":\"cmpl-reset\",\"choi";
  (void)!write(fd, partial.data(), partial.size());
  Forget(pending);
  DropPending(connection);
  evhttp_connection_free(connection);
}

void SimServer::Forget(Pending* pending) {
  auto it = pending_.find(pending->connection);
  if (it != pending_.end()) {
    it->second.erase(pending);
    if (it->second.empty()) pending_.erase(it);
  }
  delete pending;
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
    if (pending->state == Pending::State::kWaitingForSlot) {
      waiting_for_slot_.erase(std::find(waiting_for_slot_.begin(),
                                        waiting_for_slot_.end(), pending));
      --stats_.queued;
    }
    EndService(pending);
    delete pending;  // evhttp frees the request with its connection
  }
  pending_.erase(it);
}

void SimServer::OnConnectionClosed(evhttp_connection* connection, void* arg) {
  auto* self = static_cast<SimServer*>(arg);
  if (self->connections_.erase(connection) > 0) --self->stats_.connections_open;
  self->ReleaseThread(connection);
  auto it = self->pending_.find(connection);
  if (it == self->pending_.end()) return;
  // libevent detached these requests from the dead connection; sending a
  // reply frees them. A reply already started is freed by libevent.
  for (Pending* pending : it->second) {
    if (pending->state != Pending::State::kTrickling) {
      evhttp_send_reply(pending->request, 499, "Client Closed Request",
                        nullptr);
    }
  }
  self->DropPending(connection);
}

void SimServer::Reply(evhttp_request* request, int status,
                      const std::string& body, bool generation) {
  if (generation) {
    --stats_.in_flight;
    ++stats_.by_status[status];
  }
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  evhttp_add_header(headers, "Content-Type", "application/json");
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(request, status, status == 200 ? "OK" : "Error", out);
  evbuffer_free(out);
}

void SimServer::CountAnswered(const SimReply& reply) {
  stats_.prompts += reply.prompts;
  stats_.prompt_tokens += reply.prompt_tokens;
  stats_.completion_tokens += reply.completion_tokens;
}

std::string SimServer::StatsJson() const {
  nlohmann::json by_status = nlohmann::json::object();
  for (const auto& [status, count] : stats_.by_status) {
    by_status[std::to_string(status)] = count;
  }
  return nlohmann::json{
      {"requests", stats_.requests},
      {"by_status", by_status},
      {"in_flight", stats_.in_flight},
      {"max_in_flight", stats_.max_in_flight},
      {"queued", stats_.queued},
      {"max_queued", stats_.max_queued},
      {"prompts", stats_.prompts},
      {"prompt_tokens", stats_.prompt_tokens},
      {"completion_tokens", stats_.completion_tokens},
      {"closed_by_client", stats_.closed_by_client},
      {"hung", stats_.hung},
      {"resets", stats_.resets},
      {"malformed", stats_.malformed},
      {"slow_bodies", stats_.slow_bodies},
      {"discovery_requests", stats_.discovery_requests},
      {"tokenize_requests", stats_.tokenize_requests},
      {"connections_open", stats_.connections_open},
      {"max_connections_open", stats_.max_connections_open},
      {"waiting_for_thread", stats_.waiting_for_thread},
      {"max_waiting_for_thread", stats_.max_waiting_for_thread},
      {"arrivals_ms", stats_.arrivals_ms}}
      .dump();
}

}  // namespace sdg::llmsim
