// HTTP/1.1 requests as the Batch API's port reads them (RFC 9112): the head
// (request line and headers) once it has all arrived, then the body in
// pieces as they come, by Content-Length or chunked, so that an upload is
// handled while it arrives instead of after. Strict where leniency lets a
// request be read two ways (both Content-Length and Transfer-Encoding, a
// header folded over lines, a repeated Content-Length that differs).
#ifndef SDG_SERVER_API_HTTP_REQUEST_PARSER_H_
#define SDG_SERVER_API_HTTP_REQUEST_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

struct HttpRequestHead {
  std::string method;
  std::string path;       // the target up to '?', as sent
  std::string query;      // after '?', undecoded
  int minor_version = 1;  // HTTP/1.x
  // Names lower-cased, values without surrounding whitespace, in order.
  std::vector<std::pair<std::string, std::string>> headers;

  // The first value of header `name` (lower case), if present.
  std::optional<std::string> Find(absl::string_view name) const;
  // Whether the connection stays open after this request's response.
  bool KeepAlive() const;
  // Whether the client waits for "100 Continue" before sending its body.
  bool ExpectsContinue() const;
};

// The errors below are absl::Status codes that HttpStatusOf turns into the
// HTTP status that answers them: INVALID_ARGUMENT 400, OUT_OF_RANGE 413
// (the body is too large), RESOURCE_EXHAUSTED 431 (the head is), and
// UNIMPLEMENTED 501 (a transfer coding other than chunked).
int HttpStatusOfParseError(const absl::Status& error);

// A request's head is the bytes up to and including the first empty line
// ("\r\n\r\n"); `head` is exactly that.
absl::StatusOr<HttpRequestHead> ParseRequestHead(absl::string_view head);

// The largest head the port reads.
inline constexpr size_t kMaxRequestHeadBytes = 64 << 10;

// A request's body, decoded as it arrives.
class HttpBodyDecoder {
 public:
  // The body `head` announces; OUT_OF_RANGE when it says it is larger than
  // `max_body_bytes` (a chunked body is stopped when it grows past it).
  static absl::StatusOr<HttpBodyDecoder> For(const HttpRequestHead& head,
                                             uint64_t max_body_bytes);

  // Decodes the next bytes off the wire, appending the body's own bytes to
  // `body`; returns how many of `input` it used (all of them, unless the
  // body ends inside it: what follows is the next request).
  absl::StatusOr<size_t> Decode(absl::string_view input, std::string& body);
  bool done() const { return state_ == State::kDone; }
  // Whether the request has a body at all.
  bool empty() const { return state_ == State::kDone && received_ == 0; }

 private:
  enum class State {
    kFixed,
    kChunkSize,
    kChunkData,
    kChunkEnd,
    kTrailer,
    kDone
  };
  HttpBodyDecoder(State state, uint64_t remaining, uint64_t max_body_bytes)
      : state_(state), remaining_(remaining), max_body_bytes_(max_body_bytes) {}
  // Takes `input` up to the end of a line; true once the line is whole in
  // line_ (without its CRLF).
  absl::StatusOr<bool> TakeLine(absl::string_view input, size_t& used);
  // A whole line is in line_: what it says in the state it ends.
  absl::Status EndLine();

  State state_;
  uint64_t remaining_;  // of the body (fixed) or of this chunk
  uint64_t max_body_bytes_;
  uint64_t received_ = 0;
  std::string line_;  // a chunk-size or trailer line being read
  size_t trailer_bytes_ = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_HTTP_REQUEST_PARSER_H_
