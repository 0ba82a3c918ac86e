#include "base/quote.h"

#include "absl/strings/str_cat.h"

namespace sdg {

std::string Quoted(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("\"", text, "\"");
  size_t cut = max_bytes;
  // Back off UTF-8 continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return absl::StrCat("\"", text.substr(0, cut), "...\" (", text.size(),
                      " bytes)");
}

}  // namespace sdg
