#include "server/api/api_http_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "server/observability/http_listener.h"

namespace sdg {
namespace {

// A streamed response whose client reads nothing for this long is ended.
constexpr absl::Duration kStalledStream = absl::Seconds(60);

const char* MethodName(evhttp_cmd_type command) {
  switch (command) {
    case EVHTTP_REQ_GET:
      return "GET";
    case EVHTTP_REQ_POST:
      return "POST";
    case EVHTTP_REQ_DELETE:
      return "DELETE";
    default:
      return "OTHER";
  }
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// An SSL_CTX with the gRPC port's certificate and key, and its client CA
// (mutual TLS) when it has one.
absl::StatusOr<SSL_CTX*> MakeTlsContext(const TlsOptions& tls) {
  SSL_CTX* context = SSL_CTX_new(TLS_server_method());
  if (context == nullptr) {
    return absl::InternalError("OpenSSL: cannot make a TLS context");
  }
  auto fail = [&](absl::string_view what) {
    SSL_CTX_free(context);
    return absl::InvalidArgumentError(
        absl::StrCat("--openai_listen's TLS: ", what, ": ", OpenSslError()));
  };
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(context, tls.cert_file.c_str()) != 1) {
    return fail(absl::StrCat("cannot use --tls_cert ", tls.cert_file));
  }
  if (SSL_CTX_use_PrivateKey_file(context, tls.key_file.c_str(),
                                  SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(context) != 1) {
    return fail(absl::StrCat("cannot use --tls_key ", tls.key_file));
  }
  if (tls.mutual()) {
    if (SSL_CTX_load_verify_locations(context, tls.client_ca_file.c_str(),
                                      nullptr) != 1) {
      return fail(
          absl::StrCat("cannot use --tls_client_ca ", tls.client_ca_file));
    }
    SSL_CTX_set_verify(
        context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return context;
}

bufferevent* NewTlsConnection(event_base* base, void* context) {
  return bufferevent_openssl_socket_new(
      base, -1, SSL_new(static_cast<SSL_CTX*>(context)),
      BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
}

void Send(evhttp_request* request, const ApiResponse& response) {
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  evhttp_add_header(headers, "Content-Type", response.content_type.c_str());
  evbuffer* body = evbuffer_new();
  evbuffer_add(body, response.body.data(), response.body.size());
  evhttp_send_reply(request, response.status, ReasonPhrase(response.status),
                    body);
  evbuffer_free(body);
}

}  // namespace

// A streamed response: chunks queued by the handler (on the executor) and
// sent on the loop; the connection's "drained" callback lets the handler
// queue more.
class ApiHttpServer::Stream final
    : public ResponseWriter,
      public std::enable_shared_from_this<Stream> {
 public:
  Stream(ApiHttpServer& server, evhttp_request* request)
      : server_(server), request_(request) {}

  absl::Status Write(std::string data) override {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return closed_ || queued_ < kMaxQueuedBytes;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&room), kStalledStream)) {
        return absl::DeadlineExceededError(
            "the client read nothing for a minute");
      }
      if (closed_) return absl::CancelledError("the client went away");
      queued_ += data.size();
    }
    server_.RunOnLoop([self = shared_from_this(), data = std::move(data)] {
      self->SendChunkOnLoop(data);
    });
    return absl::OkStatus();
  }

  void StartOnLoop(int status, const std::string& content_type) {
    keep_alive_ = shared_from_this();
    evhttp_connection* connection = evhttp_request_get_connection(request_);
    if (connection != nullptr) {
      evhttp_connection_set_closecb(connection, &Stream::OnClosed, this);
    }
    evhttp_add_header(evhttp_request_get_output_headers(request_),
                      "Content-Type", content_type.c_str());
    evhttp_send_reply_start(request_, status, ReasonPhrase(status));
  }

  void EndOnLoop() {
    if (!Closed()) {
      evhttp_connection* connection = evhttp_request_get_connection(request_);
      if (connection != nullptr) {
        evhttp_connection_set_closecb(connection, nullptr, nullptr);
      }
    }
    // Frees the request, also when its client has gone.
    evhttp_send_reply_end(request_);
    keep_alive_.reset();
  }

 private:
  bool Closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

  void SendChunkOnLoop(const std::string& data) {
    if (Closed()) return;
    evbuffer* chunk = evbuffer_new();
    evbuffer_add(chunk, data.data(), data.size());
    evhttp_send_reply_chunk_with_cb(request_, chunk, &Stream::OnDrained, this);
    evbuffer_free(chunk);
  }

  // Everything queued so far has gone to the socket.
  static void OnDrained(evhttp_connection*, void* self) {
    auto* stream = static_cast<Stream*>(self);
    absl::MutexLock lock(&stream->mu_);
    stream->queued_ = 0;
  }

  static void OnClosed(evhttp_connection*, void* self) {
    auto* stream = static_cast<Stream*>(self);
    absl::MutexLock lock(&stream->mu_);
    stream->closed_ = true;
  }

  ApiHttpServer& server_;
  evhttp_request* const request_;  // the loop's only
  // Held from the start of the response to its end: the connection's
  // callbacks point at this.
  std::shared_ptr<Stream> keep_alive_;
  absl::Mutex mu_;
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<ApiHttpServer>> ApiHttpServer::Create(
    const Options& options, Handler handler, Executor& executor) {
  // Lets other threads hand work to the loop.
  static const int threads_ready = evthread_use_pthreads();
  if (threads_ready != 0) {
    return absl::InternalError("evthread_use_pthreads failed");
  }
  std::unique_ptr<ApiHttpServer> server(
      new ApiHttpServer(std::move(handler), executor));
  if (options.tls.enabled()) {
    absl::StatusOr<SSL_CTX*> context = MakeTlsContext(options.tls);
    if (!context.ok()) return context.status();
    server->tls_ = *context;
  }
  server->base_ = event_base_new();
  server->http_ = server->base_ ? evhttp_new(server->base_) : nullptr;
  if (server->http_ == nullptr) {
    return absl::InternalError("libevent setup failed");
  }
  absl::StatusOr<int> port =
      BindHttpServer(server->http_, server->base_, options.listen,
                     "--openai_listen", "the Batch API");
  if (!port.ok()) return port.status();
  server->port_ = *port;
  if (server->tls_ != nullptr) {
    evhttp_set_bevcb(server->http_, &NewTlsConnection, server->tls_);
  }
  evhttp_set_allowed_methods(
      server->http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE);
  evhttp_set_max_body_size(server->http_,
                           static_cast<ev_ssize_t>(options.max_body_bytes));
  evhttp_set_gencb(server->http_, &ApiHttpServer::OnRequest, server.get());
  server->thread_ = std::thread([base = server->base_] {
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
  });
  pthread_setname_np(server->thread_.native_handle(), "sdg-openai-http");
  return server;
}

ApiHttpServer::~ApiHttpServer() {
  if (thread_.joinable()) {
    // The requests being handled are answered first: their handlers run
    // on the executor and hand their responses to the loop.
    absl::MutexLock lock(&mu_);
    auto idle = [this]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.Await(absl::Condition(&idle));
  }
  if (thread_.joinable()) {
    event_base_loopexit(base_, nullptr);
    thread_.join();
  }
  if (http_ != nullptr) evhttp_free(http_);
  if (base_ != nullptr) event_base_free(base_);
  if (tls_ != nullptr) SSL_CTX_free(tls_);
}

void ApiHttpServer::RunOnLoop(absl::AnyInvocable<void() &&> work) {
  auto* owned = new absl::AnyInvocable<void() &&>(std::move(work));
  event_base_once(
      base_, -1, EV_TIMEOUT,
      [](evutil_socket_t, short, void* arg) {
        std::unique_ptr<absl::AnyInvocable<void() &&>> work(
            static_cast<absl::AnyInvocable<void() &&>*>(arg));
        std::move (*work)();
      },
      owned, nullptr);
}

void ApiHttpServer::Answered() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void ApiHttpServer::OnRequest(evhttp_request* request, void* arg) {
  auto* self = static_cast<ApiHttpServer*>(arg);
  ApiRequest api;
  api.method = MethodName(evhttp_request_get_command(request));
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* path = evhttp_uri_get_path(uri);
  const char* query = evhttp_uri_get_query(uri);
  api.path = path == nullptr ? "" : path;
  api.query = query == nullptr ? "" : query;
  evkeyvalq* headers = evhttp_request_get_input_headers(request);
  if (const char* value = evhttp_find_header(headers, "Authorization")) {
    api.authorization = value;
  }
  if (const char* value = evhttp_find_header(headers, "Content-Type")) {
    api.content_type = value;
  }
  evbuffer* input = evhttp_request_get_input_buffer(request);
  api.body.resize(evbuffer_get_length(input));
  evbuffer_remove(input, api.body.data(), api.body.size());
  {
    absl::MutexLock lock(&self->mu_);
    ++self->in_flight_;
  }
  self->executor_.Post([self, request, api = std::move(api)]() mutable {
    ApiResponse response = self->handler_(std::move(api));
    if (!response.stream) {
      self->RunOnLoop([self, request, response = std::move(response)] {
        Send(request, response);
        self->Answered();
      });
      return;
    }
    auto stream = std::make_shared<Stream>(*self, request);
    self->RunOnLoop([stream, status = response.status,
                     content_type = response.content_type] {
      stream->StartOnLoop(status, content_type);
    });
    if (absl::Status streamed = response.stream(*stream); !streamed.ok()) {
      Log(LogLevel::kInfo, "Batch API response ended early",
          {{"error", std::string(streamed.message())}});
    }
    self->RunOnLoop([self, stream] {
      stream->EndOnLoop();
      self->Answered();
    });
  });
}

}  // namespace sdg
