// multipart/form-data bodies (RFC 7578), as the OpenAI SDKs and curl send a
// file upload, read as they arrive: MultipartReader takes the body in
// pieces of any size and hands each part's bytes on as soon as they cannot
// be the start of the next boundary, so a 200 MB file passes through a few
// kilobytes of memory.
#ifndef SDG_SERVER_API_MULTIPART_H_
#define SDG_SERVER_API_MULTIPART_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

struct FormPartHead {
  std::string name;
  std::string filename;  // empty for a plain field
};

// What a MultipartReader finds, in order: each part's start, its bytes in
// pieces, its end. An error stops the reading and is returned by Feed.
class FormVisitor {
 public:
  virtual ~FormVisitor() = default;
  virtual absl::Status PartStarts(const FormPartHead& head) = 0;
  virtual absl::Status PartData(absl::string_view data) = 0;
  virtual absl::Status PartEnds() = 0;
};

class MultipartReader {
 public:
  // INVALID_ARGUMENT unless `content_type` is multipart/form-data naming a
  // boundary.
  static absl::StatusOr<MultipartReader> Create(absl::string_view content_type);

  // The body's next bytes. INVALID_ARGUMENT saying what is malformed, or
  // the visitor's error; after an error the reader takes nothing more.
  absl::Status Feed(absl::string_view data, FormVisitor& visitor);
  // The body has ended: INVALID_ARGUMENT unless its closing boundary came.
  absl::Status Finish() const;

 private:
  enum class State { kPreamble, kAfterBoundary, kHeaders, kData, kEnd };
  explicit MultipartReader(std::string delimiter)
      : delimiter_(std::move(delimiter)) {}
  absl::Status Step(FormVisitor& visitor, bool& progressed);

  // "\r\n--" and the boundary: what ends a part.
  std::string delimiter_;
  State state_ = State::kPreamble;
  // Bytes read but not yet used: at most a part's headers, or in a part's
  // data fewer bytes than the delimiter.
  std::string pending_;
  absl::Status error_;
};

struct FormPart {
  std::string name;
  std::string filename;
  std::string data;
};

// A visitor that keeps every part whole.
class FormPartsCollector final : public FormVisitor {
 public:
  absl::Status PartStarts(const FormPartHead& head) override;
  absl::Status PartData(absl::string_view data) override;
  absl::Status PartEnds() override { return absl::OkStatus(); }
  std::vector<FormPart>& parts() { return parts_; }

 private:
  std::vector<FormPart> parts_;
};

// The parts of a whole `body`.
absl::StatusOr<std::vector<FormPart>> ParseMultipart(
    absl::string_view content_type, absl::string_view body);

}  // namespace sdg

#endif  // SDG_SERVER_API_MULTIPART_H_
