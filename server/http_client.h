// An HTTP/1.1 client on one libcurl multi event loop (curl_multi_socket_action
// on epoll): one thread drives every transfer, connections are kept alive and
// reused across requests and jobs, and a request can be cancelled at once from
// any thread.
#ifndef SDG_SERVER_HTTP_CLIENT_H_
#define SDG_SERVER_HTTP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef void CURLM;
typedef void CURL;
typedef int curl_socket_t;

namespace sdg {

struct HttpRequest {
  std::string url;
  // Sent as a POST with Content-Type: application/json when set; a GET
  // otherwise.
  std::optional<std::string> json_body;
  // Extra "Name: value" header lines.
  std::vector<std::string> headers;
  // Wait this long before starting (retry backoff) without holding a thread.
  absl::Duration start_delay = absl::ZeroDuration();
  // Replaces Options::request_timeout for this request when set.
  std::optional<absl::Duration> timeout;
};

struct HttpResponse {
  // OK when an HTTP reply arrived, whatever its status code. Otherwise
  // UNAVAILABLE (connection failed or reset), DEADLINE_EXCEEDED (timeout) or
  // CANCELLED.
  absl::Status transport;
  long http_code = 0;
  std::string body;
  // From Retry-After (seconds) or retry-after-ms, when the reply had one.
  std::optional<absl::Duration> retry_after;
  // From the start of the transfer to its end (start_delay excluded).
  absl::Duration elapsed;
};

class HttpClient {
 public:
  struct Options {
    absl::Duration connect_timeout = absl::Seconds(5);
    absl::Duration request_timeout = absl::Seconds(600);
  };
  using RequestId = uint64_t;
  // Runs on the event loop thread: it must be quick and must not block.
  using DoneCallback = absl::AnyInvocable<void(HttpResponse)>;

  static absl::StatusOr<std::unique_ptr<HttpClient>> Create(
      const Options& options);
  // Completes every unfinished request with CANCELLED, then stops the loop.
  ~HttpClient();

  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  RequestId Start(HttpRequest request, DoneCallback done);
  // A timer on the event loop: `done` runs after `delay` with an OK transport
  // and no HTTP exchange, or with CANCELLED if Cancel(id) comes first.
  RequestId Wait(absl::Duration delay, DoneCallback done);
  // Aborts the request: its callback runs with CANCELLED unless it already
  // completed. Unknown or finished ids are ignored.
  void Cancel(RequestId id);

 private:
  struct Transfer;
  struct Pending {
    RequestId id;
    HttpRequest request;
    DoneCallback done;
    bool timer_only = false;  // from Wait(): nothing to send
  };
  struct Delayed {
    absl::Time start_at;
    RequestId id;
    bool operator>(const Delayed& other) const {
      return start_at > other.start_at;
    }
  };

  HttpClient(const Options& options, CURLM* multi, int epoll_fd, int wake_fd);
  void Loop();
  void Wake();
  // libcurl's socket and timer callbacks (curl_multi_socket_action).
  static int OnSocket(CURL* easy, curl_socket_t socket, int what, void* self,
                      void* socket_data);
  static int OnTimer(CURLM* multi, long timeout_ms, void* self);
  // Loop-thread helpers.
  RequestId Enqueue(Pending pending);
  void Launch(Pending pending);
  void Complete(RequestId id, HttpResponse response);
  void CompleteFinishedTransfers();
  int PollTimeoutMs() const;

  const Options options_;
  CURLM* const multi_;
  const int epoll_fd_;
  const int wake_fd_;  // an eventfd: Start and Cancel wake the loop

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Pending> to_start_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> to_cancel_ ABSL_GUARDED_BY(mu_);

  // Owned by the loop thread alone.
  absl::flat_hash_map<RequestId, std::unique_ptr<Transfer>> transfers_;
  absl::flat_hash_map<RequestId, Pending> waiting_;  // for their start_delay
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<>>
      wake_times_;
  absl::Time curl_deadline_ = absl::InfiniteFuture();  // from OnTimer
  static constexpr size_t kMaxIdleHandles = 1024;
  std::vector<CURL*> idle_handles_;  // easy handles to reuse

  std::thread loop_;
};

}  // namespace sdg

#endif  // SDG_SERVER_HTTP_CLIENT_H_
