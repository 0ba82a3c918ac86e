// A raw HTTP/1.1 client for tests that must say exactly what goes over the
// wire (pipelining, chunks, a body cut short): a blocking socket on
// 127.0.0.1, and responses read by their Content-Length, their chunks or to
// the connection's end.
#ifndef SDG_TESTS_TESTING_RAW_HTTP_CLIENT_H_
#define SDG_TESTS_TESTING_RAW_HTTP_CLIENT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sdg::testing {

class RawClient {
 public:
  explicit RawClient(int port);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void Send(absl::string_view bytes);

  struct Response {
    std::string head;  // status line and headers, up to the empty line
    std::string body;
    bool chunked = false;
  };
  // The next response (a 1xx has no body).
  Response Read();
  // Reads to the connection's end: true once the server has closed it.
  bool Closed();

  int fd() const { return fd_; }

 private:
  size_t Fill(absl::string_view marker);
  bool ReadMore();

  const int fd_;
  std::string buffer_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_RAW_HTTP_CLIENT_H_
