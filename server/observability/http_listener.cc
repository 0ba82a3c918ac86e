#include "server/observability/http_listener.h"

#include <event2/http.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/listen_address.h"

namespace sdg {

absl::StatusOr<evconnlistener*> BindListener(event_base* base,
                                             const std::string& listen,
                                             absl::string_view flag,
                                             absl::string_view serving) {
  // libevent writes with write(2): a client that has closed its end would
  // raise SIGPIPE, which ends the process. Every server ignores it; the
  // write then fails with EPIPE and the connection is closed.
  static const bool sigpipe_ignored = signal(SIGPIPE, SIG_IGN) != SIG_ERR;
  (void)sigpipe_ignored;
  absl::StatusOr<ListenAddress> parsed = ParseListenAddress(listen, flag);
  if (!parsed.ok()) return parsed.status();
  evconnlistener* listener = evconnlistener_new_bind(
      base, nullptr, nullptr,
      LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 128,
      reinterpret_cast<sockaddr*>(&parsed->address),
      static_cast<int>(parsed->length));
  if (listener == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve ", serving, " on ", listen, ": ",
                     std::strerror(errno), " (set ", flag, ")"));
  }
  return listener;
}

int ListenerPort(evconnlistener* listener) {
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  getsockname(evconnlistener_get_fd(listener),
              reinterpret_cast<sockaddr*>(&bound), &bound_length);
  return ntohs(bound.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

absl::StatusOr<int> BindHttpServer(evhttp* http, event_base* base,
                                   const std::string& listen,
                                   absl::string_view flag,
                                   absl::string_view serving) {
  absl::StatusOr<evconnlistener*> listener =
      BindListener(base, listen, flag, serving);
  if (!listener.ok()) return listener.status();
  evhttp_bind_listener(http, *listener);
  return ListenerPort(*listener);
}

}  // namespace sdg
