#include "server/http/http_client.h"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/url.h"

namespace sdg {

using CurlHandle = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
using CurlHeaders = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;

struct HttpClient::Transfer {
  explicit Transfer(CURL* handle)
      : easy(handle, &curl_easy_cleanup),
        headers(nullptr, &curl_slist_free_all) {}

  RequestId id = 0;
  CurlHandle easy;
  CurlHeaders headers;
  HttpRequest request;  // keeps the POST body alive for libcurl
  DoneCallback done;
  HttpResponse response;
  absl::Time started;
  char error[CURL_ERROR_SIZE] = {};  // libcurl's specific error message
};

namespace {

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  ReadHeaderLine(absl::string_view(data, size * count),
                 *static_cast<HttpResponse*>(user));
  return size * count;
}

// curl's text for a failed connection names the time it took ("Failed to
// connect to H port P after 3 ms: ..."). Without it, the same failure reads
// the same every time, so a shard's rows that failed for one reason are one
// shard_error, not several that differ by a millisecond.
std::string WithoutConnectTime(std::string detail) {
  static constexpr std::string_view kAfter = " after ";
  static constexpr std::string_view kMs = " ms";
  for (size_t at = detail.find(kAfter); at != std::string::npos;
       at = detail.find(kAfter, at + 1)) {
    size_t end = at + kAfter.size();
    const size_t digits = end;
    while (end < detail.size() && absl::ascii_isdigit(detail[end])) ++end;
    if (end > digits &&
        std::string_view(detail).substr(end, kMs.size()) == kMs &&
        (end + kMs.size() == detail.size() ||
         detail[end + kMs.size()] == ':')) {
      detail.erase(at, end + kMs.size() - at);
      break;
    }
  }
  return detail;
}

curl_socket_t OnOpenSocket(void* origin, curlsocktype, curl_sockaddr* address) {
  curl_socket_t socket_fd = socket(
      address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  if (socket_fd != CURL_SOCKET_BAD) ++*static_cast<int*>(origin);
  return socket_fd;
}

int OnCloseSocket(void* origin, curl_socket_t socket_fd) {
  --*static_cast<int*>(origin);
  return close(socket_fd);
}

absl::Status TransportStatus(CURLcode code, const char* error_buffer) {
  std::string detail =
      WithoutConnectTime(error_buffer[0] != '\0' ? std::string(error_buffer)
                                                 : curl_easy_strerror(code));
  switch (code) {
    case CURLE_OK:
      return absl::OkStatus();
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(detail);
    default:
      return absl::UnavailableError(detail);
  }
}

}  // namespace

void ReadHeaderLine(absl::string_view line, HttpResponse& response) {
  size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return;
  absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
  absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  double number = 0;
  int64_t whole = 0;
  absl::Duration duration;
  HttpResponse::RateLimitHeaders& limits = response.rate_limit;
  if (absl::EqualsIgnoreCase(name, "retry-after-ms") &&
      absl::SimpleAtod(value, &number) && number >= 0) {
    response.retry_after = absl::Milliseconds(number);
  } else if (absl::EqualsIgnoreCase(name, "retry-after") &&
             !response.retry_after.has_value() &&
             absl::SimpleAtod(value, &number) && number >= 0) {
    response.retry_after = absl::Seconds(number);
  } else if (absl::EqualsIgnoreCase(name, "x-ratelimit-remaining-requests") &&
             absl::SimpleAtoi(value, &whole)) {
    limits.remaining_requests = whole;
  } else if (absl::EqualsIgnoreCase(name, "x-ratelimit-remaining-tokens") &&
             absl::SimpleAtoi(value, &whole)) {
    limits.remaining_tokens = whole;
  } else if (absl::EqualsIgnoreCase(name, "x-ratelimit-reset-requests") &&
             absl::ParseDuration(value, &duration) &&
             duration >= absl::ZeroDuration()) {
    limits.reset_requests = duration;
  } else if (absl::EqualsIgnoreCase(name, "x-ratelimit-reset-tokens") &&
             absl::ParseDuration(value, &duration) &&
             duration >= absl::ZeroDuration()) {
    limits.reset_tokens = duration;
  }
}

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(
    const Options& options, EventLoop& loop) {
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return absl::InternalError("curl_multi_init failed");
  return std::unique_ptr<HttpClient>(new HttpClient(options, loop, multi));
}

HttpClient::HttpClient(const Options& options, EventLoop& loop, CURLM* multi)
    : options_(options), loop_(loop), multi_(multi) {
  // libcurl says which sockets to watch and when its next timeout is; the
  // loop waits on epoll and tells libcurl only about sockets that are ready,
  // so the cost of a wakeup does not grow with the requests in flight.
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &HttpClient::OnSocket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &HttpClient::OnTimer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  loop_.Attach(*this);
}

HttpClient::~HttpClient() {
  loop_.Detach();  // runs Detached() on the loop's thread
  for (CURL* handle : idle_handles_) curl_easy_cleanup(handle);
  curl_multi_cleanup(multi_);
}

int HttpClient::OnSocket(CURL*, curl_socket_t socket, int what, void* self,
                         void*) {
  EventLoop& loop = static_cast<HttpClient*>(self)->loop_;
  if (what == CURL_POLL_REMOVE) {
    loop.Unwatch(socket);
    return 0;
  }
  loop.Watch(socket, ((what & CURL_POLL_IN) ? EPOLLIN : 0u) |
                         ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u));
  return 0;
}

int HttpClient::OnTimer(CURLM*, long timeout_ms, void* self) {
  static_cast<HttpClient*>(self)->curl_deadline_ =
      timeout_ms < 0 ? absl::InfiniteFuture()
                     : absl::Now() + absl::Milliseconds(timeout_ms);
  return 0;
}

HttpClient::RequestId HttpClient::Start(HttpRequest request,
                                        DoneCallback done) {
  RequestId id;
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    // The loop takes the whole queue at once: one wakeup per batch.
    wake = to_start_.empty();
    to_start_.push_back({id, std::move(request), std::move(done)});
  }
  if (wake) loop_.Wake();
  return id;
}

void HttpClient::Cancel(RequestId id) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    wake = to_cancel_.empty();
    to_cancel_.push_back(id);
  }
  if (wake) loop_.Wake();
}

HttpClient::Origin& HttpClient::OriginOf(absl::string_view url) {
  // "scheme://host:port" ends at the first '/' after "://".
  const size_t scheme_end = url.find("://");
  const size_t path =
      url.find('/', scheme_end == absl::string_view::npos ? 0 : scheme_end + 3);
  std::unique_ptr<Origin>& origin = origins_[std::string(
      url.substr(0, path == absl::string_view::npos ? url.size() : path))];
  if (origin == nullptr) origin = std::make_unique<Origin>();
  return *origin;
}

void HttpClient::StartTransfer(Submitted submitted) {
  CURL* handle = nullptr;
  if (idle_handles_.empty()) {
    handle = curl_easy_init();
  } else {
    handle = idle_handles_.back();
    idle_handles_.pop_back();
  }
  auto transfer = std::make_unique<Transfer>(handle);
  transfer->id = submitted.id;
  transfer->request = std::move(submitted.request);
  transfer->done = std::move(submitted.done);
  CURL* easy = transfer->easy.get();
  const HttpRequest& request = transfer->request;

  for (const std::string& header : request.headers) {
    transfer->headers.reset(
        curl_slist_append(transfer->headers.release(), header.c_str()));
  }
  if (request.json_body.has_value()) {
    transfer->headers.reset(curl_slist_append(
        transfer->headers.release(), "Content-Type: application/json"));
  }
  // Without this, libcurl waits for "100 Continue" on bodies over 1 KiB.
  transfer->headers.reset(
      curl_slist_append(transfer->headers.release(), "Expect:"));

  CURLcode rc = CURLE_OK;
  auto set = [&](CURLoption option, auto value) {
    if (rc == CURLE_OK) rc = curl_easy_setopt(easy, option, value);
  };
  set(CURLOPT_URL, request.url.c_str());
  set(CURLOPT_NOSIGNAL, 1L);
  set(CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  set(CURLOPT_HTTPHEADER, transfer->headers.get());
  set(CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  set(CURLOPT_TIMEOUT_MS,
      static_cast<long>(absl::ToInt64Milliseconds(
          request.timeout.value_or(options_.request_timeout))));
  set(CURLOPT_WRITEFUNCTION, &OnBody);
  set(CURLOPT_WRITEDATA, &transfer->response.body);
  set(CURLOPT_HEADERFUNCTION, &OnHeader);
  set(CURLOPT_HEADERDATA, &transfer->response);
  set(CURLOPT_PRIVATE, transfer.get());
  set(CURLOPT_ERRORBUFFER, transfer->error);
  set(CURLOPT_TCP_NODELAY, 1L);
  Origin& origin = OriginOf(request.url);
  set(CURLOPT_OPENSOCKETFUNCTION, &OnOpenSocket);
  set(CURLOPT_OPENSOCKETDATA, &origin.connections);
  set(CURLOPT_CLOSESOCKETFUNCTION, &OnCloseSocket);
  set(CURLOPT_CLOSESOCKETDATA, &origin.connections);
  set(CURLOPT_FORBID_REUSE,
      request.max_connections.has_value() &&
              origin.connections > *request.max_connections
          ? 1L
          : 0L);
  if (request.json_body.has_value()) {
    set(CURLOPT_POST, 1L);
    set(CURLOPT_POSTFIELDS, request.json_body->data());
    set(CURLOPT_POSTFIELDSIZE_LARGE,
        static_cast<curl_off_t>(request.json_body->size()));
  }
  if (rc != CURLE_OK) {
    HttpResponse response;
    response.transport = absl::InternalError(
        absl::StrCat("curl_easy_setopt failed: ", curl_easy_strerror(rc)));
    transfer->done(std::move(response));
    return;
  }
  if (CURLMcode mrc = curl_multi_add_handle(multi_, easy); mrc != CURLM_OK) {
    HttpResponse response;
    response.transport = absl::InternalError(absl::StrCat(
        "curl_multi_add_handle failed: ", curl_multi_strerror(mrc)));
    transfer->done(std::move(response));
    return;
  }
  transfer->started = absl::Now();
  transfers_.emplace(transfer->id, std::move(transfer));
}

void HttpClient::FinishTransfer(RequestId id, HttpResponse response) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return;
  std::unique_ptr<Transfer> transfer = std::move(it->second);
  transfers_.erase(it);
  curl_multi_remove_handle(multi_, transfer->easy.get());
  // Reused: a fresh easy handle per request costs allocations and setup.
  if (idle_handles_.size() < kMaxIdleHandles) {
    curl_easy_reset(transfer->easy.get());
    idle_handles_.push_back(transfer->easy.release());
  }
  response.elapsed = absl::Now() - transfer->started;
  transfer->done(std::move(response));
}

void HttpClient::AbortTransfer(RequestId id, absl::string_view why) {
  HttpResponse response;
  response.transport = absl::CancelledError(why);
  FinishTransfer(id, std::move(response));
}

void HttpClient::CompleteFinishedTransfers() {
  int remaining = 0;
  while (CURLMsg* message = curl_multi_info_read(multi_, &remaining)) {
    if (message->msg != CURLMSG_DONE) continue;
    Transfer* transfer = nullptr;
    curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, &transfer);
    HttpResponse response = std::move(transfer->response);
    CURLcode code = message->data.result;
    response.transport = TransportStatus(code, transfer->error);
    if (code == CURLE_OK) {
      curl_easy_getinfo(message->easy_handle, CURLINFO_RESPONSE_CODE,
                        &response.http_code);
    } else {
      response.body.clear();
      response.transport = absl::Status(
          response.transport.code(),
          absl::StrCat(response.transport.message(), " (",
                       RedactUrlPassword(transfer->request.url), ")"));
    }
    FinishTransfer(transfer->id, std::move(response));
  }
}

void HttpClient::TakeSubmittedWork() {
  std::vector<Submitted> to_start;
  std::vector<RequestId> to_cancel;
  {
    absl::MutexLock lock(&mu_);
    to_start.swap(to_start_);
    to_cancel.swap(to_cancel_);
  }
  for (Submitted& submitted : to_start) StartTransfer(std::move(submitted));
  for (RequestId id : to_cancel) AbortTransfer(id, "request cancelled");
}

void HttpClient::OnReady(int fd, uint32_t events) {
  int flags = 0;
  if (events & EPOLLIN) flags |= CURL_CSELECT_IN;
  if (events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
  if (events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
  int running = 0;
  curl_multi_socket_action(multi_, fd, flags, &running);
}

void HttpClient::AfterWait() {
  if (absl::Now() >= curl_deadline_) {
    curl_deadline_ = absl::InfiniteFuture();  // OnTimer may set it again
    int running = 0;
    curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
  }
  CompleteFinishedTransfers();
}

void HttpClient::Detached() {
  // Nothing may be left waiting for a callback: requests complete with
  // CANCELLED.
  std::vector<Submitted> never_started;
  {
    absl::MutexLock lock(&mu_);
    never_started.swap(to_start_);
  }
  for (Submitted& submitted : never_started) {
    HttpResponse response;
    response.transport = absl::CancelledError("HTTP client is shutting down");
    submitted.done(std::move(response));
  }
  std::vector<RequestId> unfinished;
  for (const auto& [id, transfer] : transfers_) unfinished.push_back(id);
  for (RequestId id : unfinished) {
    AbortTransfer(id, "HTTP client is shutting down");
  }
}

}  // namespace sdg
