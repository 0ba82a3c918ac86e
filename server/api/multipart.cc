#include "server/api/multipart.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sdg {
namespace {

// A part's headers are a few lines; more than this is not a form.
constexpr size_t kMaxPartHeadBytes = 16 << 10;

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

FormPartHead ParsePartHead(absl::string_view headers) {
  FormPartHead head;
  for (absl::string_view line : absl::StrSplit(headers, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(
            absl::StripAsciiWhitespace(line.substr(0, colon)),
            "Content-Disposition")) {
      head.name = Parameter(line.substr(colon + 1), "name");
      head.filename = Parameter(line.substr(colon + 1), "filename");
    }
  }
  return head;
}

}  // namespace

absl::StatusOr<MultipartReader> MultipartReader::Create(
    absl::string_view content_type) {
  if (!absl::StartsWithIgnoreCase(content_type, "multipart/form-data")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "send the file as multipart/form-data (got Content-Type \"",
        content_type, "\")"));
  }
  const std::string boundary = Parameter(content_type, "boundary");
  if (boundary.empty()) return Malformed("its Content-Type has no boundary");
  if (boundary.size() > 200) {
    return Malformed("its boundary is longer than 200 characters");
  }
  MultipartReader reader(absl::StrCat("\r\n--", boundary));
  // The first boundary may open the body: read it as if a line ended
  // before it.
  reader.pending_ = "\r\n";
  return reader;
}

absl::Status MultipartReader::Feed(absl::string_view data,
                                   FormVisitor& visitor) {
  if (!error_.ok()) return error_;
  if (state_ == State::kEnd) return absl::OkStatus();  // the epilogue
  pending_.append(data.data(), data.size());
  bool progressed = true;
  while (progressed && error_.ok()) {
    progressed = false;
    error_ = Step(visitor, progressed);
  }
  return error_;
}

absl::Status MultipartReader::Step(FormVisitor& visitor, bool& progressed) {
  const absl::string_view pending = pending_;
  const size_t keep = delimiter_.size() - 1;
  switch (state_) {
    case State::kPreamble: {
      const size_t at = pending.find(delimiter_);
      if (at == absl::string_view::npos) {
        if (pending.size() > keep) pending_.erase(0, pending.size() - keep);
        return absl::OkStatus();
      }
      pending_.erase(0, at + delimiter_.size());
      state_ = State::kAfterBoundary;
      progressed = true;
      return absl::OkStatus();
    }
    case State::kAfterBoundary:
      if (pending.size() < 2) return absl::OkStatus();
      if (absl::StartsWith(pending, "--")) {
        pending_.clear();
        state_ = State::kEnd;
        return absl::OkStatus();
      }
      if (!absl::StartsWith(pending, "\r\n")) {
        return Malformed("a boundary is not followed by a line break");
      }
      pending_.erase(0, 2);
      state_ = State::kHeaders;
      progressed = true;
      return absl::OkStatus();
    case State::kHeaders: {
      size_t end = 0;
      size_t used = 0;
      if (absl::StartsWith(pending, "\r\n")) {
        used = 2;  // a part with no headers
      } else if (end = pending.find("\r\n\r\n");
                 end != absl::string_view::npos) {
        used = end + 4;
      } else {
        if (pending.size() > kMaxPartHeadBytes) {
          return Malformed("a part's headers are longer than 16 KiB");
        }
        return absl::OkStatus();
      }
      const FormPartHead head = ParsePartHead(pending.substr(0, end));
      pending_.erase(0, used);
      state_ = State::kData;
      progressed = true;
      return visitor.PartStarts(head);
    }
    case State::kData: {
      const size_t at = pending.find(delimiter_);
      if (at == absl::string_view::npos) {
        // Only an end that could begin the delimiter is held back.
        size_t sure = pending.size();
        for (size_t i = pending.size() > keep ? pending.size() - keep : 0;
             i < pending.size(); ++i) {
          if (absl::StartsWith(delimiter_, pending.substr(i))) {
            sure = i;
            break;
          }
        }
        if (sure == 0) return absl::OkStatus();
        absl::Status taken = visitor.PartData(pending.substr(0, sure));
        pending_.erase(0, sure);
        return taken;
      }
      if (at > 0) {
        if (absl::Status taken = visitor.PartData(pending.substr(0, at));
            !taken.ok()) {
          return taken;
        }
      }
      pending_.erase(0, at + delimiter_.size());
      state_ = State::kAfterBoundary;
      progressed = true;
      return visitor.PartEnds();
    }
    case State::kEnd:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status MultipartReader::Finish() const {
  if (!error_.ok()) return error_;
  switch (state_) {
    case State::kEnd:
      return absl::OkStatus();
    case State::kPreamble:
      return Malformed("no boundary in it");
    case State::kHeaders:
      return Malformed("a part's headers do not end");
    case State::kData:
    case State::kAfterBoundary:
      return Malformed("a part does not end with the boundary");
  }
  return absl::OkStatus();
}

absl::Status FormPartsCollector::PartStarts(const FormPartHead& head) {
  parts_.push_back({head.name, head.filename, ""});
  return absl::OkStatus();
}

absl::Status FormPartsCollector::PartData(absl::string_view data) {
  parts_.back().data.append(data.data(), data.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FormPart>> ParseMultipart(
    absl::string_view content_type, absl::string_view body) {
  absl::StatusOr<MultipartReader> reader =
      MultipartReader::Create(content_type);
  if (!reader.ok()) return reader.status();
  FormPartsCollector collect;
  if (absl::Status fed = reader->Feed(body, collect); !fed.ok()) return fed;
  if (absl::Status finished = reader->Finish(); !finished.ok()) {
    return finished;
  }
  return std::move(collect.parts());
}

}  // namespace sdg
