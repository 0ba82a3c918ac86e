// Repeatable flags (--backend a=... --backend b=...), which absl flags do not
// support: each later occurrence replaces the earlier one.
#ifndef SDG_BASE_REPEATED_FLAG_H_
#define SDG_BASE_REPEATED_FLAG_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace sdg {

// Removes every `--NAME=VALUE` and `--NAME VALUE` (also with one dash) from
// `args` and returns the values in order. A trailing `--NAME` with no value
// is left for the flag parser to report.
std::vector<std::string> TakeRepeatedFlag(absl::string_view name,
                                          std::vector<char*>& args);

}  // namespace sdg

#endif  // SDG_BASE_REPEATED_FLAG_H_
