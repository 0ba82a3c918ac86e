#include "server/api/multipart.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sdg {
namespace {

// The value of `key` in a header's parameters (`; key="value"`), unquoted.
std::string Parameter(absl::string_view header, absl::string_view key) {
  for (absl::string_view piece : absl::StrSplit(header, ';')) {
    piece = absl::StripAsciiWhitespace(piece);
    const size_t equals = piece.find('=');
    if (equals == absl::string_view::npos) continue;
    if (!absl::EqualsIgnoreCase(
            absl::StripAsciiWhitespace(piece.substr(0, equals)), key)) {
      continue;
    }
    absl::string_view value =
        absl::StripAsciiWhitespace(piece.substr(equals + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    return std::string(value);
  }
  return "";
}

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("the multipart/form-data body is malformed: ", why));
}

}  // namespace

absl::StatusOr<std::vector<FormPart>> ParseMultipart(
    absl::string_view content_type, absl::string_view body) {
  if (!absl::StartsWithIgnoreCase(content_type, "multipart/form-data")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "send the file as multipart/form-data (got Content-Type \"",
        content_type, "\")"));
  }
  const std::string boundary = Parameter(content_type, "boundary");
  if (boundary.empty()) return Malformed("its Content-Type has no boundary");
  const std::string delimiter = absl::StrCat("--", boundary);
  size_t at = body.find(delimiter);
  if (at == absl::string_view::npos) return Malformed("no boundary in it");
  std::vector<FormPart> parts;
  while (true) {
    at += delimiter.size();
    if (body.substr(at, 2) == "--") return parts;  // the closing delimiter
    if (body.substr(at, 2) != "\r\n") {
      return Malformed("a boundary is not followed by a line break");
    }
    at += 2;
    const size_t headers_end = body.find("\r\n\r\n", at);
    if (headers_end == absl::string_view::npos) {
      return Malformed("a part's headers do not end");
    }
    FormPart part;
    for (absl::string_view line :
         absl::StrSplit(body.substr(at, headers_end - at), "\r\n")) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      if (absl::EqualsIgnoreCase(
              absl::StripAsciiWhitespace(line.substr(0, colon)),
              "Content-Disposition")) {
        part.name = Parameter(line.substr(colon + 1), "name");
        part.filename = Parameter(line.substr(colon + 1), "filename");
      }
    }
    const size_t data_start = headers_end + 4;
    const size_t next = body.find(absl::StrCat("\r\n", delimiter), data_start);
    if (next == absl::string_view::npos) {
      return Malformed("a part does not end with the boundary");
    }
    part.data = body.substr(data_start, next - data_start);
    parts.push_back(std::move(part));
    at = next + 2;
  }
}

}  // namespace sdg
