#include "base/quote.h"

#include "absl/strings/str_cat.h"

namespace sdg {

namespace {

// The first bytes of `text` that fit in `max_bytes`, ending between UTF-8
// characters.
absl::string_view Head(absl::string_view text, size_t max_bytes) {
  size_t cut = max_bytes;
  // Back off UTF-8 continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return text.substr(0, cut);
}

}  // namespace

std::string Quoted(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("\"", text, "\"");
  return absl::StrCat("\"", Head(text, max_bytes), "...\" (", text.size(),
                      " bytes)");
}

std::string CutShort(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return absl::StrCat(Head(text, max_bytes), "... (", text.size(), " bytes)");
}

}  // namespace sdg
