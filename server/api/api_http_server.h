// The Batch API's HTTP port (--openai_listen): libevent's HTTP server on one
// thread of its own, with the gRPC port's TLS certificate (and client CA)
// when it has one. The loop thread only parses and sends: each request is
// handed to the blocking executor, whose handler may block on the store,
// and its response comes back to the loop to be sent. A streamed response
// (a file's content) is sent in chunks as the handler writes them, the
// handler waiting while more than kMaxQueuedBytes wait for the socket; a
// client that goes away ends the stream.
#ifndef SDG_SERVER_API_API_HTTP_SERVER_H_
#define SDG_SERVER_API_API_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/executor.h"
#include "server/api/transport_security.h"

struct event_base;
struct evhttp;
struct evhttp_request;
struct ssl_ctx_st;

namespace sdg {

struct ApiRequest {
  std::string method;  // "GET", "POST", "DELETE"
  std::string path;    // without the query
  std::string query;   // after '?', undecoded
  std::optional<std::string> authorization;
  std::string content_type;
  std::string body;
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
  using Handler = std::function<ApiResponse(ApiRequest)>;

  static constexpr size_t kMaxQueuedBytes = 4 << 20;

  // `executor` outlives the server.
  static absl::StatusOr<std::unique_ptr<ApiHttpServer>> Create(
      const Options& options, Handler handler, Executor& executor);
  // Stops accepting, waits for the requests being handled to be answered,
  // then stops the loop.
  ~ApiHttpServer();

  ApiHttpServer(const ApiHttpServer&) = delete;
  ApiHttpServer& operator=(const ApiHttpServer&) = delete;

  int port() const { return port_; }

 private:
  class Stream;
  ApiHttpServer(Handler handler, Executor& executor)
      : handler_(std::move(handler)), executor_(executor) {}
  static void OnRequest(evhttp_request* request, void* self);
  // Runs `work` on the loop thread.
  void RunOnLoop(absl::AnyInvocable<void() &&> work);
  // A request's response is sent (or abandoned): one fewer in flight.
  void Answered();

  const Handler handler_;
  Executor& executor_;
  event_base* base_ = nullptr;
  evhttp* http_ = nullptr;
  ssl_ctx_st* tls_ = nullptr;
  int port_ = 0;
  absl::Mutex mu_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_API_HTTP_SERVER_H_
