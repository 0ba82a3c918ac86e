#include "server/http/url.h"

#include "absl/strings/str_cat.h"

namespace sdg {

std::string RedactUrlPassword(absl::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == absl::string_view::npos) return std::string(url);
  const size_t authority = scheme + 3;
  // The authority ends at the first '/', '?' or '#'; userinfo at its last '@'.
  size_t end = url.find_first_of("/?#", authority);
  if (end == absl::string_view::npos) end = url.size();
  const size_t at = url.substr(0, end).rfind('@');
  if (at == absl::string_view::npos || at < authority) return std::string(url);
  const size_t colon = url.substr(0, at).find(':', authority);
  if (colon == absl::string_view::npos) return std::string(url);
  return absl::StrCat(url.substr(0, colon + 1), "[redacted]", url.substr(at));
}

}  // namespace sdg
