// The --auth_tokens_file format: one `TENANT sha256:HEX` per line, where HEX
// is the SHA-256 of the token a caller of that tenant sends. The file holds
// digests, not tokens, so that reading it (a backup, a Secret listed by an
// operator, a core dump) gives nothing a caller could send. Tokens are long
// random strings, not passwords: an unsalted SHA-256 cannot be reversed.
#ifndef SDG_SERVER_API_TOKENS_FILE_H_
#define SDG_SERVER_API_TOKENS_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

struct TenantToken {
  std::string tenant;
  // 32 bytes, the SHA-256 of the token.
  std::string token_digest;
};

// Parses the file's text. Blank lines and lines starting with # are
// skipped. Errors name the line and never echo the digest. A tenant may
// have several tokens (rotation); one digest may not name two tenants.
absl::StatusOr<std::vector<TenantToken>> ParseTokensFile(
    absl::string_view text);

// Tenant names: what Prometheus labels and logs carry. 1 to 63 of
// [a-z0-9._-], starting with a letter or digit.
bool IsValidTenantName(absl::string_view name);

}  // namespace sdg

#endif  // SDG_SERVER_API_TOKENS_FILE_H_
