// HOST:PORT or [IPv6]:PORT, as the --*_listen flags take them, parsed into
// a socket address to bind. PORT may be 0 (a free port: tests use it),
// which libevent's own parser refuses.
#ifndef SDG_BASE_LISTEN_ADDRESS_H_
#define SDG_BASE_LISTEN_ADDRESS_H_

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

struct ListenAddress {
  sockaddr_storage address{};
  socklen_t length = 0;
};

// INVALID_ARGUMENT naming `flag` when `listen` is not HOST:PORT with a
// numeric IPv4 or bracketed IPv6 host.
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen,
                                                 absl::string_view flag);

}  // namespace sdg

#endif  // SDG_BASE_LISTEN_ADDRESS_H_
