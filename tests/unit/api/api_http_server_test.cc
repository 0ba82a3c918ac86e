// The Batch API's HTTP/1.1 port with a test handler, driven by a raw socket
// so that each test says exactly what goes over the wire: keep-alive and
// pipelining, chunked bodies both ways, 100-continue, an answer before the
// body has been sent, the errors for a request it cannot read, and a
// client that goes away in the middle of a download.
#include "server/api/api_http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/executor.h"
#include "tests/testing/raw_http_client.h"

namespace sdg {
namespace {

using ::sdg::testing::RawClient;

using ::testing::HasSubstr;
using ::testing::StartsWith;

class ApiHttpServerTest : public ::testing::Test {
 protected:
  void Start(ApiHttpServer::Handler handler, size_t max_body = 64 << 20) {
    ApiHttpServer::Options options;
    options.listen = "127.0.0.1:0";
    options.max_body_bytes = max_body;
    auto server = ApiHttpServer::Create(options, std::move(handler), executor_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  int port() const { return server_->port(); }

  Executor executor_{2, "test-http"};
  std::unique_ptr<ApiHttpServer> server_;
};

// Answers with the method, the path and the body it read.
ApiResponse Echo(const ApiRequest& request) {
  absl::StatusOr<std::string> body = ReadWholeBody(*request.body, 64 << 20);
  ApiResponse response;
  response.content_type = "text/plain";
  response.body = body.ok()
                      ? absl::StrCat(request.method, " ", request.path, " ",
                                     body->size(), " ", body->substr(0, 16))
                      : absl::StrCat("error: ", body.status().message());
  return response;
}

TEST_F(ApiHttpServerTest, RequestsOnOneConnectionAreAnsweredInOrder) {
  Start(Echo);
  RawClient client(port());
  // Three requests at once (pipelined): a GET, a POST with a body, a GET.
  client.Send(
      "GET /v1/a HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v1/b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
      "GET /v1/c?q=1 HTTP/1.1\r\n\r\n");
  RawClient::Response first = client.Read();
  EXPECT_THAT(first.head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(first.head, HasSubstr("Content-Type: text/plain\r\n"));
  EXPECT_THAT(first.head, HasSubstr("Date: "));
  EXPECT_EQ(first.body, "GET /v1/a 0 ");
  EXPECT_EQ(client.Read().body, "POST /v1/b 5 hello");
  EXPECT_EQ(client.Read().body, "GET /v1/c 0 ");
  // And the connection stays open for more.
  client.Send("GET /v1/d HTTP/1.1\r\nConnection: close\r\n\r\n");
  RawClient::Response last = client.Read();
  EXPECT_EQ(last.body, "GET /v1/d 0 ");
  EXPECT_THAT(last.head, HasSubstr("Connection: close\r\n"));
  EXPECT_TRUE(client.Closed());
}

TEST_F(ApiHttpServerTest, AChunkedUploadReachesTheHandlerWhole) {
  Start(Echo);
  RawClient client(port());
  client.Send(
      "POST /v1/files HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\n{\"a\": \r\n");
  client.Send("3\r\n1}\n\r\n0\r\n\r\n");
  EXPECT_EQ(client.Read().body, "POST /v1/files 9 {\"a\": 1}\n");
}

TEST_F(ApiHttpServerTest, AClientThatExpectsContinueIsToldToSend) {
  Start(Echo);
  RawClient client(port());
  client.Send(
      "POST /v1/files HTTP/1.1\r\nContent-Length: 4\r\n"
      "Expect: 100-continue\r\n\r\n");
  // The body is not sent until the server says so.
  RawClient::Response go_on = client.Read();
  EXPECT_THAT(go_on.head, StartsWith("HTTP/1.1 100 Continue\r\n"));
  client.Send("body");
  EXPECT_EQ(client.Read().body, "POST /v1/files 4 body");
}

TEST_F(ApiHttpServerTest, AnAnswerComesBeforeTheBodyIsSent) {
  // A handler that refuses at once reads none of the body: the client has
  // its answer while it has sent 1 MB of a 64 MB upload, and the
  // connection reads on past the rest, dropping it, to the next request.
  Start([](const ApiRequest& request) {
    if (request.method == "GET") return Echo(request);
    ApiResponse refused;
    refused.status = 401;
    refused.body = R"({"error": "no"})";
    return refused;
  });
  RawClient client(port());
  const size_t total = 64 << 20;
  client.Send(absl::StrCat("POST /v1/files HTTP/1.1\r\nContent-Length: ", total,
                           "\r\n\r\n"));
  const std::string megabyte(1 << 20, 'x');
  client.Send(megabyte);
  RawClient::Response refused = client.Read();
  EXPECT_THAT(refused.head, StartsWith("HTTP/1.1 401 Unauthorized\r\n"));
  EXPECT_EQ(refused.body, R"({"error": "no"})");
  for (size_t sent = megabyte.size(); sent < total; sent += megabyte.size()) {
    client.Send(megabyte);
  }
  client.Send("GET /after HTTP/1.1\r\n\r\n");
  EXPECT_EQ(client.Read().body, "GET /after 0 ");
}

TEST_F(ApiHttpServerTest, ABodyTheHandlerReadsSlowlyArrivesWhole) {
  // More than the loop queues for the handler (1 MiB), read a piece at a
  // time: the loop stops and resumes reading, and nothing is lost.
  Start([](const ApiRequest& request) {
    std::string piece;
    size_t bytes = 0;
    uint64_t sum = 0;
    while (true) {
      absl::StatusOr<bool> more = request.body->Next(piece);
      if (!more.ok() || !*more) break;
      bytes += piece.size();
      for (char c : piece) sum += static_cast<unsigned char>(c);
    }
    ApiResponse response;
    response.body = absl::StrCat(bytes, " ", sum);
    return response;
  });
  RawClient client(port());
  std::string body;
  uint64_t sum = 0;
  for (int i = 0; i < (8 << 20); ++i) {
    body.push_back(static_cast<char>('a' + i % 26));
    sum += static_cast<unsigned char>(body.back());
  }
  client.Send(absl::StrCat("POST /up HTTP/1.1\r\nContent-Length: ", body.size(),
                           "\r\n\r\n"));
  client.Send(body);
  EXPECT_EQ(client.Read().body, absl::StrCat(body.size(), " ", sum));
}

TEST_F(ApiHttpServerTest, WhatCannotBeReadIsAnsweredAndTheConnectionClosed) {
  Start(Echo, /*max_body=*/1000);
  struct Case {
    std::string request;
    std::string status_line;
    std::string message;
  };
  const Case cases[] = {
      {"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: "
       "chunked\r\n\r\n",
       "HTTP/1.1 400 Bad Request", "both Content-Length and Transfer-Encoding"},
      {"POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n",
       "HTTP/1.1 413 Content Too Large",
       "larger than the 1000 this port takes"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: br\r\n\r\n",
       "HTTP/1.1 501 Not Implemented", "Transfer-Encoding \\\"br\\\""},
      {"GET / HTTP/3\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported",
       "not HTTP/3"},
      {"GET / HTTP/1.1\r\nX: " + std::string(70 << 10, 'y'),
       "HTTP/1.1 431 Request Header Fields Too Large", "larger than 64 KiB"},
  };
  for (const Case& c : cases) {
    RawClient client(port());
    client.Send(c.request);
    RawClient::Response response = client.Read();
    EXPECT_THAT(response.head, StartsWith(c.status_line + "\r\n"));
    EXPECT_THAT(response.head, HasSubstr("Connection: close\r\n"));
    EXPECT_THAT(response.body, HasSubstr(c.message));
    EXPECT_THAT(response.body, HasSubstr("\"type\":\"invalid_request_error\""));
    // The server reads on until the client, told to close, does so.
  }
  // A chunked body that goes wrong after the head reaches the handler as
  // an error; the answer closes the connection.
  RawClient client(port());
  client.Send(
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n");
  RawClient::Response response = client.Read();
  EXPECT_THAT(response.body, HasSubstr("longer than its size says"));
  EXPECT_THAT(response.head, HasSubstr("Connection: close\r\n"));
}

ApiResponse Numbers(int chunks) {
  ApiResponse response;
  response.content_type = "text/plain";
  response.stream = [chunks](ResponseWriter& writer) {
    for (int i = 0; i < chunks; ++i) {
      if (absl::Status s = writer.Write(absl::StrCat(i, "\n")); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  };
  return response;
}

TEST_F(ApiHttpServerTest, AStreamedResponseIsChunkedForHttp11AndClosedFor10) {
  Start([](const ApiRequest&) { return Numbers(1000); });
  std::string expected;
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&expected, i, "\n");
  {
    RawClient client(port());
    client.Send("GET /f HTTP/1.1\r\n\r\nGET /g HTTP/1.1\r\n\r\n");
    RawClient::Response first = client.Read();
    EXPECT_TRUE(first.chunked);
    EXPECT_EQ(first.body, expected);
    EXPECT_EQ(client.Read().body, expected);
  }
  RawClient old(port());
  old.Send("GET /f HTTP/1.0\r\n\r\n");
  RawClient::Response response = old.Read();
  EXPECT_FALSE(response.chunked);
  EXPECT_THAT(response.head, HasSubstr("Connection: close\r\n"));
  EXPECT_EQ(response.body, expected);
}

TEST_F(ApiHttpServerTest, AClientThatGoesAwayStopsTheStream) {
  absl::Notification stopped;
  absl::Status stop;
  Start([&](const ApiRequest&) {
    ApiResponse response;
    response.stream = [&](ResponseWriter& writer) {
      // Writes until the writer says the client has gone.
      const std::string chunk(64 << 10, 'z');
      absl::Status written;
      while ((written = writer.Write(chunk)).ok()) {
      }
      stop = written;
      stopped.Notify();
      return written;
    };
    return response;
  });
  {
    RawClient client(port());
    client.Send("GET /endless HTTP/1.1\r\n\r\n");
    char bytes[1024];
    ASSERT_GT(recv(client.fd(), bytes, sizeof(bytes), 0), 0);
  }
  stopped.WaitForNotification();
  EXPECT_EQ(stop.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(stop.message(), HasSubstr("the client went away"));
}

}  // namespace
}  // namespace sdg
