// multipart/form-data bodies (RFC 7578), as the OpenAI SDKs send a file
// upload: each part's name, filename and bytes, read in place.
#ifndef SDG_SERVER_API_MULTIPART_H_
#define SDG_SERVER_API_MULTIPART_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

struct FormPart {
  std::string name;
  std::string filename;    // empty for a plain field
  absl::string_view data;  // into the body
};

// The parts of `body`, whose Content-Type is `content_type` (it names the
// boundary). INVALID_ARGUMENT saying what is wrong for anything else.
absl::StatusOr<std::vector<FormPart>> ParseMultipart(
    absl::string_view content_type, absl::string_view body);

}  // namespace sdg

#endif  // SDG_SERVER_API_MULTIPART_H_
