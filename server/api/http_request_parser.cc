#include "server/api/http_request_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace sdg {
namespace {

constexpr size_t kMaxHeaders = 100;
constexpr size_t kMaxChunkLineBytes = 1024;
constexpr size_t kMaxTrailerBytes = 8 << 10;

absl::Status BadRequest(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad HTTP request: ", why));
}

// RFC 9110's tchar: what a method or a header name is made of.
bool IsToken(absl::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           absl::StrContains("!#$%&'*+-.^_`|~", c);
  });
}

bool HasControl(absl::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    return c == '\r' || c == '\n' || c == '\0';
  });
}

// Whether comma-separated header `value` lists `token`.
bool ListsToken(absl::string_view value, absl::string_view token) {
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(item), token)) {
      return true;
    }
  }
  return false;
}

}  // namespace

int HttpStatusOfParseError(const absl::Status& error) {
  switch (error.code()) {
    case absl::StatusCode::kOutOfRange:
      return 413;
    case absl::StatusCode::kResourceExhausted:
      return 431;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kFailedPrecondition:
      return 505;
    default:
      return 400;
  }
}

std::optional<std::string> HttpRequestHead::Find(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return std::nullopt;
}

bool HttpRequestHead::KeepAlive() const {
  const std::optional<std::string> connection = Find("connection");
  if (connection.has_value() && ListsToken(*connection, "close")) return false;
  if (minor_version == 0) {
    return connection.has_value() && ListsToken(*connection, "keep-alive");
  }
  return true;
}

bool HttpRequestHead::ExpectsContinue() const {
  const std::optional<std::string> expect = Find("expect");
  return minor_version >= 1 && expect.has_value() &&
         absl::EqualsIgnoreCase(*expect, "100-continue");
}

absl::StatusOr<HttpRequestHead> ParseRequestHead(absl::string_view head) {
  if (!absl::ConsumeSuffix(&head, "\r\n\r\n")) {
    return BadRequest("its head does not end with an empty line");
  }
  // A client may send empty lines before a request (RFC 9112 2.2).
  while (absl::ConsumePrefix(&head, "\r\n")) {
  }
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  HttpRequestHead parsed;
  const std::vector<absl::string_view> words =
      absl::StrSplit(lines.front(), ' ');
  if (words.size() != 3 || !IsToken(words[0]) || words[1].empty() ||
      HasControl(lines.front())) {
    return BadRequest("its request line is not METHOD TARGET HTTP/1.1");
  }
  parsed.method = std::string(words[0]);
  if (words[2] == "HTTP/1.1") {
    parsed.minor_version = 1;
  } else if (words[2] == "HTTP/1.0") {
    parsed.minor_version = 0;
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat("this port speaks HTTP/1.1 and HTTP/1.0, not ", words[2]));
  }
  absl::string_view target = words[1];
  // The absolute form (a proxy's): keep its path and query.
  if (absl::ConsumePrefix(&target, "http://") ||
      absl::ConsumePrefix(&target, "https://")) {
    const size_t path = target.find_first_of("/?");
    target = path == absl::string_view::npos ? "/" : target.substr(path);
  }
  const size_t question = target.find('?');
  parsed.path = std::string(target.substr(0, question));
  if (question != absl::string_view::npos) {
    parsed.query = std::string(target.substr(question + 1));
  }
  if (lines.size() - 1 > kMaxHeaders) {
    return absl::ResourceExhaustedError(
        absl::StrCat("bad HTTP request: more than ", kMaxHeaders, " headers"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon)) ||
        HasControl(line)) {
      return BadRequest(absl::StrCat("header line ", i, " is not NAME: VALUE"));
    }
    parsed.headers.emplace_back(
        absl::AsciiStrToLower(line.substr(0, colon)),
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  }
  return parsed;
}

absl::StatusOr<HttpBodyDecoder> HttpBodyDecoder::For(
    const HttpRequestHead& head, uint64_t max_body_bytes) {
  std::optional<std::string> length;
  bool has_transfer_encoding = false;
  for (const auto& [name, value] : head.headers) {
    if (name == "transfer-encoding") {
      if (has_transfer_encoding || !absl::EqualsIgnoreCase(value, "chunked")) {
        return absl::UnimplementedError(
            absl::StrCat("bad HTTP request: Transfer-Encoding \"", value,
                         "\"; this port takes chunked or a Content-Length"));
      }
      has_transfer_encoding = true;
    }
    if (name == "content-length") {
      // Repeated, or a list, it must say one length.
      for (absl::string_view item : absl::StrSplit(value, ',')) {
        item = absl::StripAsciiWhitespace(item);
        if (length.has_value() && *length != item) {
          return BadRequest("it has two different Content-Lengths");
        }
        length = std::string(item);
      }
    }
  }
  if (has_transfer_encoding) {
    if (length.has_value()) {
      return BadRequest("it has both Content-Length and Transfer-Encoding");
    }
    if (head.minor_version == 0) {
      return BadRequest("HTTP/1.0 has no Transfer-Encoding");
    }
    return HttpBodyDecoder(State::kChunkSize, 0, max_body_bytes);
  }
  if (!length.has_value()) return HttpBodyDecoder(State::kDone, 0, 0);
  uint64_t bytes = 0;
  if (length->empty() ||
      !std::all_of(length->begin(), length->end(),
                   [](char c) { return absl::ascii_isdigit(c); }) ||
      !absl::SimpleAtoi(*length, &bytes)) {
    return BadRequest(
        absl::StrCat("Content-Length \"", *length, "\" is not a number"));
  }
  if (bytes > max_body_bytes) {
    return absl::OutOfRangeError(
        absl::StrCat("the request body (", bytes, " bytes) is larger than the ",
                     max_body_bytes, " this port takes"));
  }
  return HttpBodyDecoder(bytes == 0 ? State::kDone : State::kFixed, bytes,
                         max_body_bytes);
}

absl::StatusOr<bool> HttpBodyDecoder::TakeLine(absl::string_view input,
                                               size_t& used) {
  const size_t newline = input.find('\n');
  const size_t take =
      newline == absl::string_view::npos ? input.size() : newline + 1;
  line_.append(input.data(), take);
  used = take;
  const size_t limit =
      state_ == State::kTrailer ? kMaxTrailerBytes : kMaxChunkLineBytes;
  if (line_.size() > limit) {
    return BadRequest("a chunk's size line or its trailer is too long");
  }
  if (newline == absl::string_view::npos) return false;
  if (!absl::EndsWith(line_, "\r\n")) {
    return BadRequest("a line of its chunked body does not end with CRLF");
  }
  line_.resize(line_.size() - 2);
  return true;
}

absl::Status HttpBodyDecoder::EndLine() {
  const std::string line = std::exchange(line_, {});
  switch (state_) {
    case State::kChunkEnd:
      if (!line.empty()) {
        return BadRequest("a chunk is longer than its size says");
      }
      state_ = State::kChunkSize;
      return absl::OkStatus();
    case State::kChunkSize: {
      // The size, then maybe ";extensions", which are ignored.
      const absl::string_view hex = absl::StripTrailingAsciiWhitespace(
          absl::string_view(line).substr(0, line.find(';')));
      uint64_t size = 0;
      if (hex.empty() || hex.size() > 15 ||
          !std::all_of(hex.begin(), hex.end(),
                       [](char c) { return absl::ascii_isxdigit(c); }) ||
          !absl::SimpleHexAtoi(hex, &size)) {
        return BadRequest(absl::StrCat("a chunk's size \"", hex,
                                       "\" is not a hexadecimal number"));
      }
      if (received_ + size > max_body_bytes_) {
        return absl::OutOfRangeError(
            absl::StrCat("the request body is larger than the ",
                         max_body_bytes_, " bytes this port takes"));
      }
      remaining_ = size;
      state_ = size == 0 ? State::kTrailer : State::kChunkData;
      return absl::OkStatus();
    }
    case State::kTrailer:
      // Trailer fields are read and dropped; an empty line ends them.
      if (line.empty()) state_ = State::kDone;
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

absl::StatusOr<size_t> HttpBodyDecoder::Decode(absl::string_view input,
                                               std::string& body) {
  size_t at = 0;
  while (at < input.size() && state_ != State::kDone) {
    const absl::string_view rest = input.substr(at);
    switch (state_) {
      case State::kFixed:
      case State::kChunkData: {
        const size_t take =
            static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        body.append(rest.data(), take);
        at += take;
        remaining_ -= take;
        received_ += take;
        if (remaining_ == 0) {
          state_ = state_ == State::kFixed ? State::kDone : State::kChunkEnd;
        }
        break;
      }
      case State::kChunkEnd:
      case State::kChunkSize:
      case State::kTrailer: {
        size_t used = 0;
        absl::StatusOr<bool> whole = TakeLine(rest, used);
        if (!whole.ok()) return whole.status();
        at += used;
        if (state_ == State::kTrailer) {
          trailer_bytes_ += used;
          if (trailer_bytes_ > kMaxTrailerBytes) {
            return BadRequest("its trailer is longer than 8 KiB");
          }
        }
        if (*whole) SDG_RETURN_IF_ERROR(EndLine());
        break;
      }
      case State::kDone:
        break;
    }
  }
  return at;
}

}  // namespace sdg
