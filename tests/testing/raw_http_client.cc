#include "tests/testing/raw_http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace sdg::testing {

RawClient::RawClient(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(
      connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
}

RawClient::~RawClient() { close(fd_); }

void RawClient::Send(absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ASSERT_GT(sent, 0);
    bytes.remove_prefix(static_cast<size_t>(sent));
  }
}

RawClient::Response RawClient::Read() {
  Response response;
  const size_t head_end = Fill("\r\n\r\n");
  response.head = buffer_.substr(0, head_end + 4);
  buffer_.erase(0, head_end + 4);
  if (absl::StartsWith(response.head, "HTTP/1.1 1")) return response;
  const std::string lower = absl::AsciiStrToLower(response.head);
  if (const size_t at = lower.find("content-length: ");
      at != std::string::npos) {
    size_t length = 0;
    EXPECT_TRUE(absl::SimpleAtoi(
        lower.substr(at + 16, lower.find("\r\n", at) - at - 16), &length));
    while (buffer_.size() < length && ReadMore()) {
    }
    response.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
  } else if (absl::StrContains(lower, "transfer-encoding: chunked")) {
    response.chunked = true;
    while (true) {
      const size_t line_end = Fill("\r\n");
      size_t size = 0;
      EXPECT_TRUE(absl::SimpleHexAtoi(buffer_.substr(0, line_end), &size));
      buffer_.erase(0, line_end + 2);
      while (buffer_.size() < size + 2 && ReadMore()) {
      }
      if (size == 0) {
        buffer_.erase(0, 2);
        break;
      }
      response.body += buffer_.substr(0, size);
      buffer_.erase(0, size + 2);
    }
  } else {
    while (ReadMore()) {
    }
    response.body = std::exchange(buffer_, "");
  }
  return response;
}

bool RawClient::Closed() {
  while (ReadMore()) {
  }
  return true;
}

size_t RawClient::Fill(absl::string_view marker) {
  size_t at;
  while ((at = buffer_.find(marker.data(), 0, marker.size())) ==
         std::string::npos) {
    if (!ReadMore()) {
      ADD_FAILURE() << "the connection ended before " << marker;
      return 0;
    }
  }
  return at;
}

bool RawClient::ReadMore() {
  char bytes[65536];
  const ssize_t got = recv(fd_, bytes, sizeof(bytes), 0);
  if (got <= 0) return false;
  buffer_.append(bytes, static_cast<size_t>(got));
  return true;
}

}  // namespace sdg::testing
