// The Batch API's HTTP port (--openai_listen): HTTP/1.1 on libevent's
// bufferevents, one loop thread of its own, with the gRPC port's TLS
// certificate (and client CA) when it has one. The loop only reads and
// writes bytes: each request's handler runs on the blocking executor from
// the moment its head has arrived, reading the body as it comes (an upload
// is stored while it arrives, never held whole) and writing its response,
// which the loop sends. Both directions are bounded: the loop stops reading
// while kMaxQueuedBodyBytes of body wait for the handler, and a streamed
// response's handler waits while kMaxQueuedBytes wait for the socket.
#ifndef SDG_SERVER_API_API_HTTP_SERVER_H_
#define SDG_SERVER_API_API_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/executor.h"
#include "server/api/transport_security.h"

struct event_base;
struct evconnlistener;
struct ssl_ctx_st;

namespace sdg {

// A request's body as it arrives.
class RequestBody {
 public:
  virtual ~RequestBody() = default;
  // Replaces `piece` with the body's next bytes; false once it has ended.
  // CANCELLED when the client has gone; INVALID_ARGUMENT or OUT_OF_RANGE
  // when its body is malformed or larger than the port takes.
  virtual absl::StatusOr<bool> Next(std::string& piece) = 0;
};

// The whole of `body`; INVALID_ARGUMENT once it passes `max_bytes`.
absl::StatusOr<std::string> ReadWholeBody(RequestBody& body, size_t max_bytes);

struct ApiRequest {
  std::string method;  // "GET", "POST", "DELETE", ...
  std::string path;    // without the query, as sent
  std::string query;   // after '?', undecoded
  std::optional<std::string> authorization;
  std::string content_type;
  // Read while the handler runs; what it leaves unread is discarded.
  RequestBody* body = nullptr;
};

// Where a streamed response's handler writes its body.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // Queues `data`; blocks while more than kMaxQueuedBytes wait. CANCELLED
  // once the client has gone: the handler then stops.
  virtual absl::Status Write(std::string data) = 0;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Set for a streamed body (sent chunked after status and headers): runs
  // on the executor; an error after the head ends the response early (the
  // client sees a truncated chunked body, not a clean end).
  std::function<absl::Status(ResponseWriter&)> stream;
};

class ApiHttpServer {
 public:
  struct Options {
    // HOST:PORT; port 0 picks a free one.
    std::string listen;
    TlsOptions tls;
    // The largest request body (the biggest file upload, plus its form).
    size_t max_body_bytes = 256 << 20;
  };
  // Runs on the executor, once per request.
  using Handler = std::function<ApiResponse(const ApiRequest&)>;

  static constexpr size_t kMaxQueuedBytes = 4 << 20;
  static constexpr size_t kMaxQueuedBodyBytes = 1 << 20;

  // `executor` outlives the server.
  static absl::StatusOr<std::unique_ptr<ApiHttpServer>> Create(
      const Options& options, Handler handler, Executor& executor);
  // Stops accepting, waits for the requests being handled to be answered,
  // then closes every connection and stops the loop.
  ~ApiHttpServer();

  ApiHttpServer(const ApiHttpServer&) = delete;
  ApiHttpServer& operator=(const ApiHttpServer&) = delete;

  int port() const { return port_; }

 private:
  class Connection;
  class Exchange;
  ApiHttpServer(const Options& options, Handler handler, Executor& executor)
      : options_(options), handler_(std::move(handler)), executor_(executor) {}
  // Runs `work` on the loop thread.
  void RunOnLoop(absl::AnyInvocable<void() &&> work);
  // Runs `work` on the loop thread and waits for it.
  void RunOnLoopAndWait(absl::AnyInvocable<void() &&> work);
  // On the loop: a new connection from the listener.
  void Accept(int socket);
  // Starts `exchange`'s handler on the executor.
  void Handle(std::shared_ptr<Exchange> exchange, ApiRequest request);

  const Options options_;
  const Handler handler_;
  Executor& executor_;
  event_base* base_ = nullptr;
  evconnlistener* listener_ = nullptr;
  ssl_ctx_st* tls_ = nullptr;
  int port_ = 0;
  std::thread thread_;
  // The loop's: every open connection, and whether it takes new requests.
  absl::flat_hash_map<Connection*, std::shared_ptr<Connection>> connections_;
  bool stopping_ = false;
  absl::Mutex mu_;
  size_t handlers_running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_API_HTTP_SERVER_H_
