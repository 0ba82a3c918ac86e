// An HTTP/1.1 client driven by an event loop (curl_multi_socket_action on
// the loop's epoll): the loop's thread drives every transfer, connections
// are kept alive and reused across requests and jobs, and a request can be
// cancelled at once from any thread. Start and Cancel never block on the
// network.
#ifndef SDG_SERVER_HTTP_HTTP_CLIENT_H_
#define SDG_SERVER_HTTP_HTTP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/event_loop.h"
#include "server/http/http_transport.h"

typedef void CURLM;
typedef void CURL;
typedef int curl_socket_t;

namespace sdg {

// Reads one header line of a reply into `response`: Retry-After and
// retry-after-ms, and the x-ratelimit-* headers of hosted APIs.
void ReadHeaderLine(absl::string_view line, HttpResponse& response);

class HttpClient final : public HttpTransport, private EventLoop::Driver {
 public:
  struct Options {
    absl::Duration connect_timeout = absl::Seconds(5);
    absl::Duration request_timeout = absl::Seconds(600);
  };
  // Runs on `loop` (which outlives the client).
  static absl::StatusOr<std::unique_ptr<HttpClient>> Create(
      const Options& options, EventLoop& loop);
  // Completes every unfinished request with CANCELLED, on the loop's
  // thread, and leaves the loop.
  ~HttpClient() override;

  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // HttpTransport. Callbacks and timers run on the loop's thread.
  RequestId Start(HttpRequest request, DoneCallback done) override;
  void Cancel(RequestId id) override;
  TimerService& timers() override { return loop_; }

  // The loop the client runs on, whose timers run on the same thread as
  // the client's callbacks (retry backoff, an endpoint's return).
  EventLoop& loop() const { return loop_; }

 private:
  struct Transfer;
  // The sockets libcurl holds open to one scheme://host:port, counted by
  // its open and close socket callbacks (libcurl gives a connection the
  // callbacks of the transfer that opened it).
  struct Origin {
    int connections = 0;
  };
  struct Submitted {
    RequestId id;
    HttpRequest request;
    DoneCallback done;
  };
  HttpClient(const Options& options, EventLoop& loop, CURLM* multi);
  // libcurl's socket and timer callbacks (curl_multi_socket_action).
  static int OnSocket(CURL* easy, curl_socket_t socket, int what, void* self,
                      void* socket_data);
  static int OnTimer(CURLM* multi, long timeout_ms, void* self);

  // EventLoop::Driver, on the loop's thread: starts what Start() queued
  // and aborts what Cancel() asked for; drives libcurl on a ready socket
  // and at its timeout; completes what finished; and at the end aborts
  // what is left.
  void TakeSubmittedWork() override;
  absl::Time NextDeadline() const override { return curl_deadline_; }
  void OnReady(int fd, uint32_t events) override;
  void AfterWait() override;
  void Detached() override;

  void StartTransfer(Submitted submitted);
  void CompleteFinishedTransfers();
  // Removes the transfer from libcurl, keeps its handle for reuse, and runs
  // its callback with `response`. Unknown ids (already finished) are ignored.
  void FinishTransfer(RequestId id, HttpResponse response);
  // Stops a transfer in progress (libcurl closes its connection) and
  // completes it with CANCELLED and `why`.
  void AbortTransfer(RequestId id, absl::string_view why);
  // The origin of `url` (scheme://host:port), made on first use.
  Origin& OriginOf(absl::string_view url);

  const Options options_;
  EventLoop& loop_;
  CURLM* const multi_;

  absl::Mutex mu_;
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Submitted> to_start_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> to_cancel_ ABSL_GUARDED_BY(mu_);

  // Owned by the loop thread alone.
  absl::flat_hash_map<RequestId, std::unique_ptr<Transfer>> transfers_;
  absl::Time curl_deadline_ = absl::InfiniteFuture();  // from OnTimer
  // Never erased: libcurl's connections point at them until they close.
  absl::flat_hash_map<std::string, std::unique_ptr<Origin>> origins_;
  static constexpr size_t kMaxIdleHandles = 1024;
  std::vector<CURL*> idle_handles_;  // easy handles to reuse
};

}  // namespace sdg

#endif  // SDG_SERVER_HTTP_HTTP_CLIENT_H_
