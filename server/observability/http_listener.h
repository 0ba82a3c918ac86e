// What sdgd's two HTTP ports (the /metrics server and the Batch API's)
// share: a libevent listener bound to a HOST:PORT flag's value.
#ifndef SDG_SERVER_OBSERVABILITY_HTTP_LISTENER_H_
#define SDG_SERVER_OBSERVABILITY_HTTP_LISTENER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct event_base;
struct evconnlistener;
struct evhttp;

namespace sdg {

// A listener on `base` bound to `listen`, HOST:PORT or [IPv6]:PORT (port 0:
// a free one), with no callback yet; the caller frees it. Errors name
// `flag`, and `serving` says what the port is for ("metrics", "the Batch
// API"). The first call makes the process ignore SIGPIPE.
absl::StatusOr<evconnlistener*> BindListener(event_base* base,
                                             const std::string& listen,
                                             absl::string_view flag,
                                             absl::string_view serving);

// The port `listener` is bound to.
int ListenerPort(evconnlistener* listener);

// Binds `http` (on `base`) to such a listener and returns the port bound.
absl::StatusOr<int> BindHttpServer(evhttp* http, event_base* base,
                                   const std::string& listen,
                                   absl::string_view flag,
                                   absl::string_view serving);

}  // namespace sdg

#endif  // SDG_SERVER_OBSERVABILITY_HTTP_LISTENER_H_
