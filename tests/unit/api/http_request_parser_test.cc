#include "server/api/http_request_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

HttpRequestHead Head(absl::string_view text) {
  absl::StatusOr<HttpRequestHead> head = ParseRequestHead(text);
  EXPECT_TRUE(head.ok()) << head.status();
  return head.ok() ? *head : HttpRequestHead{};
}

int StatusOf(absl::string_view text) {
  absl::StatusOr<HttpRequestHead> head = ParseRequestHead(text);
  if (!head.ok()) return HttpStatusOfParseError(head.status());
  absl::StatusOr<HttpBodyDecoder> body = HttpBodyDecoder::For(*head, 1000);
  return body.ok() ? 200 : HttpStatusOfParseError(body.status());
}

// The whole body, fed `step` bytes at a time, and what follows it.
struct Decoded {
  std::string body;
  std::string rest;
};
absl::StatusOr<Decoded> DecodeInSteps(absl::string_view head_text,
                                      absl::string_view wire, size_t step,
                                      uint64_t max_body = 1 << 20) {
  absl::StatusOr<HttpRequestHead> head = ParseRequestHead(head_text);
  if (!head.ok()) return head.status();
  absl::StatusOr<HttpBodyDecoder> decoder =
      HttpBodyDecoder::For(*head, max_body);
  if (!decoder.ok()) return decoder.status();
  Decoded decoded;
  size_t at = 0;
  while (at < wire.size() && !decoder->done()) {
    const absl::string_view piece = wire.substr(at, step);
    absl::StatusOr<size_t> used = decoder->Decode(piece, decoded.body);
    if (!used.ok()) return used.status();
    at += *used;
    if (*used < piece.size()) break;
  }
  if (!decoder->done()) return absl::DataLossError("the body did not end");
  decoded.rest = std::string(wire.substr(at));
  return decoded;
}

TEST(HttpRequestParserTest, AHeadAsTheSdkSendsItParses) {
  HttpRequestHead head = Head(
      "POST /v1/files?purpose=batch HTTP/1.1\r\n"
      "Host: 127.0.0.1:8080\r\n"
      "Authorization: Bearer  sk-alice \r\n"
      "Content-Type: multipart/form-data; boundary=x\r\n"
      "content-length: 12\r\n\r\n");
  EXPECT_EQ(head.method, "POST");
  EXPECT_EQ(head.path, "/v1/files");
  EXPECT_EQ(head.query, "purpose=batch");
  EXPECT_EQ(head.minor_version, 1);
  EXPECT_EQ(head.Find("authorization"), "Bearer  sk-alice");
  EXPECT_EQ(head.Find("content-length"), "12");
  EXPECT_EQ(head.Find("accept"), std::nullopt);
  EXPECT_TRUE(head.KeepAlive());
  EXPECT_FALSE(head.ExpectsContinue());
}

TEST(HttpRequestParserTest, ConnectionAndExpectAreRead) {
  EXPECT_FALSE(Head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").KeepAlive());
  EXPECT_FALSE(Head("GET / HTTP/1.0\r\n\r\n").KeepAlive());
  EXPECT_TRUE(
      Head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").KeepAlive());
  EXPECT_TRUE(Head("POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n")
                  .ExpectsContinue());
  // A proxy's absolute form keeps its path.
  HttpRequestHead absolute =
      Head("GET http://sdg:8080/v1/batches?limit=2 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(absolute.path, "/v1/batches");
  EXPECT_EQ(absolute.query, "limit=2");
  // Empty lines before a request are skipped.
  EXPECT_EQ(Head("\r\nGET /x HTTP/1.1\r\n\r\n").path, "/x");
}

TEST(HttpRequestParserTest, WhatCouldBeReadTwoWaysIsRefused) {
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 3\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"),
            400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 3\r\n"
                     "Content-Length: 4\r\n\r\n"),
            400);
  // The same length twice says one thing.
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 3\r\n"
                     "Content-Length: 3\r\n\r\n"),
            200);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\n folded: value\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nBad Name: value\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET /a b HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked"
                     "\r\n\r\n"),
            501);
  EXPECT_EQ(StatusOf("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400);
  // Larger than the port takes (1000 here): 413 before any of it is read.
  EXPECT_EQ(StatusOf("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n"), 413);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) absl::StrAppend(&many, "X-", i, ": y\r\n");
  EXPECT_EQ(StatusOf(many + "\r\n"), 431);
  EXPECT_THAT(
      ParseRequestHead("GET / HTTP/1.1\r\nno colon\r\n\r\n").status().message(),
      HasSubstr("header line 1 is not NAME: VALUE"));
}

TEST(HttpRequestParserTest, AFixedLengthBodyEndsWhereItSays) {
  for (size_t step : {1, 2, 7, 100}) {
    absl::StatusOr<Decoded> decoded =
        DecodeInSteps("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n",
                      "hello worldGET / HTTP/1.1\r\n\r\n", step);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->body, "hello world");
    // What follows is the next request, left for the next head.
    EXPECT_EQ(decoded->rest, "GET / HTTP/1.1\r\n\r\n") << step;
  }
}

TEST(HttpRequestParserTest, AChunkedBodyDecodesHoweverItIsCut) {
  const std::string wire =
      "5;ext=1\r\nhello\r\n"
      "1\r\n \r\n"
      "A\r\n0123456789\r\n"
      "0\r\nX-Trailer: dropped\r\n\r\n"
      "NEXT";
  for (size_t step = 1; step <= wire.size(); ++step) {
    absl::StatusOr<Decoded> decoded = DecodeInSteps(
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", wire, step);
    ASSERT_TRUE(decoded.ok()) << decoded.status() << " at step " << step;
    EXPECT_EQ(decoded->body, "hello 0123456789");
    EXPECT_EQ(decoded->rest, "NEXT");
  }
}

TEST(HttpRequestParserTest, ABadChunkedBodySaysWhatIsWrong) {
  const char kChunked[] =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_THAT(DecodeInSteps(kChunked, "zz\r\n", 100).status().message(),
              HasSubstr("is not a hexadecimal number"));
  EXPECT_THAT(
      DecodeInSteps(kChunked, "3\r\nabcdef\r\n", 100).status().message(),
      HasSubstr("longer than its size says"));
  EXPECT_THAT(DecodeInSteps(kChunked, "3\nabc\r\n", 100).status().message(),
              HasSubstr("does not end with CRLF"));
  // Growing past the limit stops it, with 413's code.
  absl::Status big =
      DecodeInSteps(kChunked,
                    "400\r\n" + std::string(1024, 'x') + "\r\n0\r\n\r\n", 100,
                    1000)
          .status();
  EXPECT_EQ(HttpStatusOfParseError(big), 413);
  EXPECT_THAT(big.message(), HasSubstr("larger than the 1000 bytes"));
}

TEST(HttpRequestParserTest, HeadersKeepTheirOrder) {
  EXPECT_THAT(Head("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\na: 3\r\n\r\n").headers,
              ElementsAre(Pair("a", "1"), Pair("b", "2"), Pair("a", "3")));
}

}  // namespace
}  // namespace sdg
