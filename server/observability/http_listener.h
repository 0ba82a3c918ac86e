// What sdgd's two libevent HTTP servers (the /metrics server and the Batch
// API's port) share: binding an evhttp to a HOST:PORT flag's value.
#ifndef SDG_SERVER_OBSERVABILITY_HTTP_LISTENER_H_
#define SDG_SERVER_OBSERVABILITY_HTTP_LISTENER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct event_base;
struct evhttp;

namespace sdg {

// Binds `http` (on `base`) to `listen`, HOST:PORT or [IPv6]:PORT (port 0: a
// free one), and returns the port bound. Errors name `flag`, and `serving`
// says what the port is for ("metrics", "the Batch API").
absl::StatusOr<int> BindHttpServer(evhttp* http, event_base* base,
                                   const std::string& listen,
                                   absl::string_view flag,
                                   absl::string_view serving);

}  // namespace sdg

#endif  // SDG_SERVER_OBSERVABILITY_HTTP_LISTENER_H_
