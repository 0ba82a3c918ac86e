// Caller text quoted inside an error message, cut short: a message must not
// grow with the input it complains about (a 1 MB job id is named by its
// first bytes and its size).
#ifndef SDG_BASE_QUOTE_H_
#define SDG_BASE_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace sdg {

inline constexpr size_t kMaxQuotedBytes = 64;

// "text", or "first bytes..." (N bytes) when longer than `max_bytes`; the cut
// falls between UTF-8 characters.
std::string Quoted(absl::string_view text, size_t max_bytes = kMaxQuotedBytes);

// The same without the quotes, for a log field (the log escapes it itself):
// text, or first bytes... (N bytes).
std::string CutShort(absl::string_view text,
                     size_t max_bytes = kMaxQuotedBytes);

}  // namespace sdg

#endif  // SDG_BASE_QUOTE_H_
