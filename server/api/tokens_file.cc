#include "server/api/tokens_file.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/quote.h"

namespace sdg {
namespace {

constexpr absl::string_view kDigestPrefix = "sha256:";

bool IsLowerHex(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isdigit(c) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

}  // namespace

bool IsValidTenantName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (!absl::ascii_isalnum(name.front())) return false;
  for (char c : name) {
    const bool ok = absl::ascii_isdigit(c) || (c >= 'a' && c <= 'z') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::vector<TenantToken>> ParseTokensFile(
    absl::string_view text) {
  std::vector<TenantToken> tokens;
  absl::flat_hash_map<std::string, std::string> tenant_of_digest;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat("line ", line_number, ": ");
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "want \"TENANT sha256:HEX\", got ", fields.size(), " fields"));
    }
    if (!IsValidTenantName(fields[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "tenant ", Quoted(fields[0]),
          " is not 1 to 63 of a-z, 0-9, '.', '_', '-' (starting with a "
          "letter or digit)"));
    }
    absl::string_view hex = fields[1];
    if (!absl::ConsumePrefix(&hex, kDigestPrefix) || hex.size() != 64 ||
        !IsLowerHex(hex)) {
      // Not echoed: the field may be a token pasted by mistake.
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          "the second field must be sha256: and 64 lower-case hex digits "
          "(the SHA-256 of the token: printf %s \"$TOKEN\" | sha256sum)"));
    }
    TenantToken token;
    token.tenant = std::string(fields[0]);
    token.token_digest = absl::HexStringToBytes(hex);
    auto [it, inserted] =
        tenant_of_digest.emplace(token.token_digest, token.tenant);
    if (!inserted && it->second != token.tenant) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the same token is listed for tenants ",
                       Quoted(it->second), " and ", Quoted(token.tenant)));
    }
    if (inserted) tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace sdg
