// A loopback port nothing listens on: bound, read, released. For servers
// that take no port 0 (Prometheus) or that a test starts late on purpose.
#ifndef SDG_TESTS_TESTING_FREE_PORT_H_
#define SDG_TESTS_TESTING_FREE_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sdg::testing {

inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_FREE_PORT_H_
