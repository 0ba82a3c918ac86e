#include "server/api/api_http_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/logging.h"
#include "server/api/http_request_parser.h"
#include "server/observability/http_listener.h"

namespace sdg {
namespace {

// A connection that sends nothing it was asked for, or reads nothing of
// what it is sent, for this long is closed.
constexpr timeval kIdleTimeout = {60, 0};
// After answering a request it could not read, the connection reads and
// drops what the client still sends for up to this long before closing:
// closing with unread input would reset the connection, and the client
// could lose the answer.
constexpr timeval kLingerTimeout = {2, 0};
// The loop reads on once the handler has taken the body down to this.
constexpr size_t kResumeBodyBelow = 256 << 10;
// The most body bytes the loop hands the handler at once.
constexpr size_t kBodyPieceBytes = 256 << 10;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
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

// The error body this port answers a request it cannot read with: OpenAI's
// error object, so that the SDKs raise their typed errors for it too.
std::string ErrorBody(const absl::Status& error) {
  return nlohmann::json{{"error",
                         {{"message", std::string(error.message())},
                          {"type", "invalid_request_error"},
                          {"param", nullptr},
                          {"code", nullptr}}}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<std::string> ReadWholeBody(RequestBody& body, size_t max_bytes) {
  std::string whole;
  std::string piece;
  while (true) {
    absl::StatusOr<bool> more = body.Next(piece);
    if (!more.ok()) return more.status();
    if (!*more) return whole;
    if (whole.size() + piece.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request body is larger than the ", max_bytes,
                       " bytes this request takes"));
    }
    whole += piece;
  }
}

// One request, from its head to its response: the handler (on the
// executor) reads the body and writes the response through it; the loop
// feeds the body in and takes the response out.
class ApiHttpServer::Exchange final
    : public RequestBody,
      public ResponseWriter,
      public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(ApiHttpServer& server, std::shared_ptr<Connection> connection)
      : server_(server), connection_(std::move(connection)) {}

  Connection& connection() const { return *connection_; }

  // The handler's side.
  absl::StatusOr<bool> Next(std::string& piece) override;
  absl::Status Write(std::string data) override;

  // The loop's side. PushBody is true when the loop should stop reading
  // until ResumeReading comes.
  bool PushBody(std::string piece) {
    absl::MutexLock lock(&mu_);
    body_queued_ += piece.size();
    body_.push_back(std::move(piece));
    reading_paused_ = body_queued_ >= kMaxQueuedBodyBytes;
    return reading_paused_;
  }
  // The body has ended (OK) or cannot be read (why).
  void EndBody(absl::Status status) {
    absl::MutexLock lock(&mu_);
    body_ended_ = true;
    body_error_ = std::move(status);
  }
  // The connection's output buffer holds `bytes`.
  void SetBuffered(size_t bytes) {
    absl::MutexLock lock(&mu_);
    buffered_ = bytes;
  }
  // The loop has taken `bytes` that Write posted.
  void TookPosted(size_t bytes) {
    absl::MutexLock lock(&mu_);
    posted_ -= bytes;
  }
  // The connection has closed.
  void Gone() {
    absl::MutexLock lock(&mu_);
    gone_ = true;
  }

 private:
  ApiHttpServer& server_;
  const std::shared_ptr<Connection> connection_;
  absl::Mutex mu_;
  std::deque<std::string> body_ ABSL_GUARDED_BY(mu_);
  size_t body_queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool body_ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status body_error_ ABSL_GUARDED_BY(mu_);
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
  size_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  size_t buffered_ ABSL_GUARDED_BY(mu_) = 0;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
};

// One client connection, on the loop only: reads each request's head,
// starts its handler, feeds it the body, sends its response, then reads
// the next request (keep-alive), one request at a time.
class ApiHttpServer::Connection final
    : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ApiHttpServer& server, bufferevent* socket)
      : server_(server), socket_(socket) {}

  void Start() {
    bufferevent_setcb(socket_, &Connection::OnRead, &Connection::OnWrite,
                      &Connection::OnEvent, this);
    evbuffer_add_cb(bufferevent_get_output(socket_), &Connection::OnOutput,
                    this);
    bufferevent_set_timeouts(socket_, &kIdleTimeout, &kIdleTimeout);
    bufferevent_enable(socket_, EV_READ | EV_WRITE);
  }

  // Whether a request's body is being read (the server stops these at
  // once when it stops) or the connection waits for a request.
  bool Reading() const { return exchange_ == nullptr || !body_done_; }

  // Reads what the input holds, as far as it goes.
  void Process();
  // From a handler, on the loop.
  void Respond(const std::shared_ptr<Exchange>& exchange,
               const ApiResponse& response);
  void StartStream(const std::shared_ptr<Exchange>& exchange, int status,
                   const std::string& content_type);
  void SendChunk(const std::shared_ptr<Exchange>& exchange,
                 const std::string& data);
  void EndStream(const std::shared_ptr<Exchange>& exchange, bool complete);
  void ResumeReading(const std::shared_ptr<Exchange>& exchange);
  void Close();

 private:
  static void OnRead(bufferevent*, void* self) {
    static_cast<Connection*>(self)->Process();
  }
  static void OnWrite(bufferevent* socket, void* self) {
    auto* connection = static_cast<Connection*>(self);
    // Also called while output remains (a deferred call from before).
    if (connection->closing_ &&
        evbuffer_get_length(bufferevent_get_output(socket)) == 0) {
      connection->Sent();
    }
  }
  static void OnEvent(bufferevent*, short what, void* self) {
    if ((what & BEV_EVENT_CONNECTED) != 0) return;  // TLS handshake done
    static_cast<Connection*>(self)->Close();
  }
  static void OnOutput(evbuffer* output, const evbuffer_cb_info*, void* self) {
    auto* connection = static_cast<Connection*>(self);
    if (connection->exchange_ != nullptr) {
      connection->exchange_->SetBuffered(evbuffer_get_length(output));
    }
  }

  bool Current(const std::shared_ptr<Exchange>& exchange) const {
    return socket_ != nullptr && exchange_ == exchange;
  }
  void Output(absl::string_view bytes) {
    bufferevent_write(socket_, bytes.data(), bytes.size());
  }
  bool ReadHead();
  void ReadBody();
  void BodyFailed(const absl::Status& error);
  // Answers a request whose head cannot be read, then closes.
  void Reject(const absl::Status& error);
  void WriteHead(int status, const std::string& content_type,
                 std::optional<size_t> length);
  // The response has been handed to the socket.
  void ResponseSent();
  // The request and its response are both done: on to the next.
  void FinishExchange();
  // Closes once the output has gone; with linger_on_close_, after reading
  // what the client still sends (it may not have seen the answer yet).
  void CloseWhenSent();
  // The output has gone and the connection is closing.
  void Sent();

  ApiHttpServer& server_;
  bufferevent* socket_;  // null once closed
  // The request being read or answered, and its body's framing.
  std::shared_ptr<Exchange> exchange_;
  std::optional<HttpBodyDecoder> decoder_;
  bool body_done_ = false;
  bool response_done_ = false;
  bool keep_alive_ = true;
  bool chunked_ = true;  // HTTP/1.1: a streamed response is chunked
  bool reading_paused_ = false;
  bool closing_ = false;  // closes once its output has gone
  // Input that was not read may follow: read what comes until the client
  // closes, rather than close at once.
  bool linger_on_close_ = false;
  bool lingering_ = false;
};

absl::StatusOr<bool> ApiHttpServer::Exchange::Next(std::string& piece) {
  bool resume = false;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !body_.empty() || body_ended_ || gone_;
    };
    mu_.Await(absl::Condition(&ready));
    if (body_.empty()) {
      if (!body_error_.ok()) return body_error_;
      if (body_ended_) return false;
      return absl::CancelledError("the client went away");
    }
    piece = std::move(body_.front());
    body_.pop_front();
    body_queued_ -= piece.size();
    if (reading_paused_ && body_queued_ <= kResumeBodyBelow) {
      reading_paused_ = false;
      resume = true;
    }
  }
  if (resume) {
    server_.RunOnLoop([self = shared_from_this()] {
      self->connection().ResumeReading(self);
    });
  }
  return true;
}

absl::Status ApiHttpServer::Exchange::Write(std::string data) {
  {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return gone_ || posted_ + buffered_ < kMaxQueuedBytes;
    };
    mu_.Await(absl::Condition(&room));
    if (gone_) return absl::CancelledError("the client went away");
    posted_ += data.size();
  }
  server_.RunOnLoop([self = shared_from_this(), data = std::move(data)] {
    self->connection().SendChunk(self, data);
  });
  return absl::OkStatus();
}

void ApiHttpServer::Connection::Process() {
  if (lingering_ && socket_ != nullptr) {
    evbuffer* input = bufferevent_get_input(socket_);
    evbuffer_drain(input, evbuffer_get_length(input));
    return;
  }
  while (socket_ != nullptr && !closing_) {
    if (exchange_ == nullptr) {
      if (!ReadHead()) return;
    } else if (!body_done_ && !reading_paused_ &&
               evbuffer_get_length(bufferevent_get_input(socket_)) > 0) {
      ReadBody();
    } else {
      return;  // for more body, or for the response
    }
  }
}

bool ApiHttpServer::Connection::ReadHead() {
  evbuffer* input = bufferevent_get_input(socket_);
  const size_t buffered = evbuffer_get_length(input);
  if (buffered == 0) return false;
  const evbuffer_ptr end = evbuffer_search(input, "\r\n\r\n", 4, nullptr);
  if (end.pos < 0 ? buffered > kMaxRequestHeadBytes
                  : static_cast<size_t>(end.pos) + 4 > kMaxRequestHeadBytes) {
    Reject(absl::ResourceExhaustedError(
        absl::StrCat("bad HTTP request: its head is larger than ",
                     kMaxRequestHeadBytes >> 10, " KiB")));
    return false;
  }
  if (end.pos < 0) return false;
  std::string bytes(static_cast<size_t>(end.pos) + 4, '\0');
  evbuffer_remove(input, bytes.data(), bytes.size());
  absl::StatusOr<HttpRequestHead> head = ParseRequestHead(bytes);
  if (!head.ok()) {
    Reject(head.status());
    return false;
  }
  absl::StatusOr<HttpBodyDecoder> decoder =
      HttpBodyDecoder::For(*head, server_.options_.max_body_bytes);
  if (!decoder.ok()) {
    Reject(decoder.status());
    return false;
  }
  if (server_.stopping_) {
    Close();
    return false;
  }
  keep_alive_ = head->KeepAlive();
  chunked_ = head->minor_version >= 1;
  decoder_ = *std::move(decoder);
  body_done_ = decoder_->done();
  response_done_ = false;
  exchange_ = std::make_shared<Exchange>(server_, shared_from_this());
  if (body_done_) {
    exchange_->EndBody(absl::OkStatus());
    // A request sent behind this one waits until this one is answered.
    bufferevent_disable(socket_, EV_READ);
  } else if (head->ExpectsContinue()) {
    Output("HTTP/1.1 100 Continue\r\n\r\n");
  }
  ApiRequest request;
  request.method = std::move(head->method);
  request.path = std::move(head->path);
  request.query = std::move(head->query);
  request.authorization = head->Find("authorization");
  request.content_type = head->Find("content-type").value_or("");
  request.body = exchange_.get();
  server_.Handle(exchange_, std::move(request));
  return true;
}

void ApiHttpServer::Connection::ReadBody() {
  evbuffer* input = bufferevent_get_input(socket_);
  std::string piece;
  while (!decoder_->done() && piece.size() < kBodyPieceBytes) {
    evbuffer_iovec extent;
    if (evbuffer_peek(input, -1, nullptr, &extent, 1) < 1 ||
        extent.iov_len == 0) {
      break;
    }
    absl::StatusOr<size_t> used = decoder_->Decode(
        absl::string_view(static_cast<const char*>(extent.iov_base),
                          extent.iov_len),
        piece);
    if (!used.ok()) {
      BodyFailed(used.status());
      return;
    }
    evbuffer_drain(input, *used);
  }
  // Once the response has gone, the rest of the body is read and dropped.
  if (!response_done_ && !piece.empty() &&
      exchange_->PushBody(std::move(piece))) {
    reading_paused_ = true;
    bufferevent_disable(socket_, EV_READ);
  }
  if (!decoder_->done()) return;
  body_done_ = true;
  exchange_->EndBody(absl::OkStatus());
  bufferevent_disable(socket_, EV_READ);
  if (response_done_) FinishExchange();
}

void ApiHttpServer::Connection::BodyFailed(const absl::Status& error) {
  // The framing is lost: nothing after this can be read.
  keep_alive_ = false;
  linger_on_close_ = true;
  body_done_ = true;
  exchange_->EndBody(error);
  bufferevent_disable(socket_, EV_READ);
  if (response_done_) FinishExchange();
}

void ApiHttpServer::Connection::Reject(const absl::Status& error) {
  keep_alive_ = false;
  linger_on_close_ = true;
  const std::string body = ErrorBody(error);
  WriteHead(HttpStatusOfParseError(error), "application/json", body.size());
  Output(body);
  CloseWhenSent();
}

void ApiHttpServer::Connection::WriteHead(int status,
                                          const std::string& content_type,
                                          std::optional<size_t> length) {
  if (server_.stopping_) keep_alive_ = false;
  std::string head =
      absl::StrCat("HTTP/1.1 ", status, " ", ReasonPhrase(status), "\r\nDate: ",
                   absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", absl::Now(),
                                    absl::UTCTimeZone()),
                   "\r\nContent-Type: ", content_type, "\r\n");
  if (length.has_value()) {
    absl::StrAppend(&head, "Content-Length: ", *length, "\r\n");
  } else if (chunked_) {
    absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n");
  } else {
    keep_alive_ = false;  // HTTP/1.0: the body ends where the connection does
  }
  if (!keep_alive_) {
    absl::StrAppend(&head, "Connection: close\r\n");
  } else if (!chunked_) {
    absl::StrAppend(&head, "Connection: keep-alive\r\n");
  }
  absl::StrAppend(&head, "\r\n");
  Output(head);
}

void ApiHttpServer::Connection::Respond(
    const std::shared_ptr<Exchange>& exchange, const ApiResponse& response) {
  if (!Current(exchange)) return;
  WriteHead(response.status, response.content_type, response.body.size());
  Output(response.body);
  ResponseSent();
}

void ApiHttpServer::Connection::StartStream(
    const std::shared_ptr<Exchange>& exchange, int status,
    const std::string& content_type) {
  if (!Current(exchange)) return;
  WriteHead(status, content_type, std::nullopt);
}

void ApiHttpServer::Connection::SendChunk(
    const std::shared_ptr<Exchange>& exchange, const std::string& data) {
  exchange->TookPosted(data.size());
  if (!Current(exchange) || data.empty()) return;
  if (chunked_) Output(absl::StrFormat("%zx\r\n", data.size()));
  Output(data);
  if (chunked_) Output("\r\n");
}

void ApiHttpServer::Connection::EndStream(
    const std::shared_ptr<Exchange>& exchange, bool complete) {
  if (!Current(exchange)) return;
  if (!complete) {
    // The client must see the body cut short, not a clean end.
    keep_alive_ = false;
    CloseWhenSent();
    return;
  }
  if (chunked_) Output("0\r\n\r\n");
  ResponseSent();
}

void ApiHttpServer::Connection::ResponseSent() {
  response_done_ = true;
  if (body_done_) {
    FinishExchange();
    return;
  }
  // The handler left some of the body unread: read on, dropping it.
  reading_paused_ = false;
  bufferevent_enable(socket_, EV_READ);
  Process();
}

void ApiHttpServer::Connection::ResumeReading(
    const std::shared_ptr<Exchange>& exchange) {
  if (!Current(exchange) || !reading_paused_) return;
  reading_paused_ = false;
  bufferevent_enable(socket_, EV_READ);
  Process();
}

void ApiHttpServer::Connection::FinishExchange() {
  exchange_.reset();
  decoder_.reset();
  body_done_ = false;
  response_done_ = false;
  reading_paused_ = false;
  if (!keep_alive_ || server_.stopping_) {
    CloseWhenSent();
    return;
  }
  bufferevent_enable(socket_, EV_READ);
  Process();  // the next request may be here already
}

void ApiHttpServer::Connection::CloseWhenSent() {
  closing_ = true;
  bufferevent_disable(socket_, EV_READ);
  // Else OnWrite calls Sent once the output has drained.
  if (evbuffer_get_length(bufferevent_get_output(socket_)) == 0) Sent();
}

void ApiHttpServer::Connection::Sent() {
  if (!linger_on_close_) {
    Close();
    return;
  }
  // The client closes once it has the answer ("Connection: close"); its
  // end, an error or the timeout closes this side.
  lingering_ = true;
  bufferevent_set_timeouts(socket_, &kLingerTimeout, nullptr);
  bufferevent_enable(socket_, EV_READ);
  Process();
}

void ApiHttpServer::Connection::Close() {
  if (socket_ == nullptr) return;
  const std::shared_ptr<Connection> self = shared_from_this();
  if (exchange_ != nullptr) {
    exchange_->Gone();
    exchange_.reset();
  }
  bufferevent_free(socket_);
  socket_ = nullptr;
  server_.connections_.erase(this);
}

absl::StatusOr<std::unique_ptr<ApiHttpServer>> ApiHttpServer::Create(
    const Options& options, Handler handler, Executor& executor) {
  // Lets other threads hand work to the loop.
  static const int threads_ready = evthread_use_pthreads();
  if (threads_ready != 0) {
    return absl::InternalError("evthread_use_pthreads failed");
  }
  std::unique_ptr<ApiHttpServer> server(
      new ApiHttpServer(options, std::move(handler), executor));
  if (options.tls.enabled()) {
    absl::StatusOr<SSL_CTX*> context = MakeTlsContext(options.tls);
    if (!context.ok()) return context.status();
    server->tls_ = *context;
  }
  server->base_ = event_base_new();
  if (server->base_ == nullptr) {
    return absl::InternalError("libevent setup failed");
  }
  absl::StatusOr<evconnlistener*> listener = BindListener(
      server->base_, options.listen, "--openai_listen", "the Batch API");
  if (!listener.ok()) return listener.status();
  server->listener_ = *listener;
  server->port_ = ListenerPort(server->listener_);
  evconnlistener_set_cb(
      server->listener_,
      [](evconnlistener*, evutil_socket_t socket, sockaddr*, int, void* self) {
        static_cast<ApiHttpServer*>(self)->Accept(socket);
      },
      server.get());
  server->thread_ = std::thread([base = server->base_] {
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
  });
  pthread_setname_np(server->thread_.native_handle(), "sdg-openai-http");
  return server;
}

ApiHttpServer::~ApiHttpServer() {
  if (thread_.joinable()) {
    // No new requests; uploads being read are dropped (they store
    // nothing), idle connections closed.
    RunOnLoopAndWait([this] {
      stopping_ = true;
      evconnlistener_disable(listener_);
      std::vector<std::shared_ptr<Connection>> reading;
      for (const auto& [raw, connection] : connections_) {
        if (connection->Reading()) reading.push_back(connection);
      }
      for (const auto& connection : reading) connection->Close();
    });
    // The requests being handled are answered: their handlers run on the
    // executor and hand their responses to the loop.
    {
      absl::MutexLock lock(&mu_);
      auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return handlers_running_ == 0;
      };
      mu_.Await(absl::Condition(&idle));
    }
    RunOnLoopAndWait([this] {
      std::vector<std::shared_ptr<Connection>> open;
      for (const auto& [raw, connection] : connections_) {
        open.push_back(connection);
      }
      for (const auto& connection : open) connection->Close();
    });
    event_base_loopexit(base_, nullptr);
    thread_.join();
  }
  if (listener_ != nullptr) evconnlistener_free(listener_);
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

void ApiHttpServer::RunOnLoopAndWait(absl::AnyInvocable<void() &&> work) {
  absl::Notification done;
  RunOnLoop([&work, &done] {
    std::move(work)();
    done.Notify();
  });
  done.WaitForNotification();
}

void ApiHttpServer::Accept(int socket) {
  const int one = 1;
  setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  constexpr int kOptions = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
  bufferevent* connection =
      tls_ != nullptr
          ? bufferevent_openssl_socket_new(base_, socket, SSL_new(tls_),
                                           BUFFEREVENT_SSL_ACCEPTING, kOptions)
          : bufferevent_socket_new(base_, socket, kOptions);
  if (connection == nullptr) {
    close(socket);
    return;
  }
  if (tls_ != nullptr) {
    // A client that closes without TLS's close_notify has still ended.
    bufferevent_openssl_set_allow_dirty_shutdown(connection, 1);
  }
  auto owned = std::make_shared<Connection>(*this, connection);
  connections_[owned.get()] = owned;
  owned->Start();
}

void ApiHttpServer::Handle(std::shared_ptr<Exchange> exchange,
                           ApiRequest request) {
  {
    absl::MutexLock lock(&mu_);
    ++handlers_running_;
  }
  executor_.Post([this, exchange = std::move(exchange),
                  request = std::move(request)]() mutable {
    ApiResponse response = handler_(request);
    if (!response.stream) {
      RunOnLoop([exchange, response = std::move(response)] {
        exchange->connection().Respond(exchange, response);
      });
    } else {
      RunOnLoop([exchange, status = response.status,
                 content_type = response.content_type] {
        exchange->connection().StartStream(exchange, status, content_type);
      });
      const absl::Status streamed = response.stream(*exchange);
      if (!streamed.ok()) {
        Log(LogLevel::kInfo, "Batch API response ended early",
            {{"error", std::string(streamed.message())}});
      }
      RunOnLoop([exchange, complete = streamed.ok()] {
        exchange->connection().EndStream(exchange, complete);
      });
    }
    absl::MutexLock lock(&mu_);
    --handlers_running_;
  });
}

}  // namespace sdg
