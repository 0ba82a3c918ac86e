// A whole file as a string (keys, tokens, certificates, block files).
#ifndef SDG_BASE_READ_FILE_H_
#define SDG_BASE_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace sdg {

// NOT_FOUND or PERMISSION_DENIED (or another code for other failures), the
// message naming the path and the system's reason.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace sdg

#endif  // SDG_BASE_READ_FILE_H_
