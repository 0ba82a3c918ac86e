#include "base/listen_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sdg {

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen,
                                                 absl::string_view flag) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " must be HOST:PORT or [IPv6]:PORT, got \"", listen, "\""));
  };
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return invalid();
  }
  const std::string host = listen.substr(0, colon);
  ListenAddress parsed;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&parsed.address);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(),
                  &v6->sin6_addr) != 1) {
      return invalid();
    }
    parsed.length = sizeof(sockaddr_in6);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&parsed.address);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) return invalid();
    parsed.length = sizeof(sockaddr_in);
  }
  return parsed;
}

}  // namespace sdg
