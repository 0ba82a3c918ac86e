#include "server/backend/api_key.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace sdg {

std::vector<std::string> ApiKey::AuthorizationHeaders() const {
  if (secret_.empty()) return {};
  return {absl::StrCat("Authorization: Bearer ", secret_)};
}

std::string ApiKey::Redact(absl::string_view text) const {
  if (secret_.empty() || !absl::StrContains(text, secret_)) {
    return std::string(text);
  }
  return absl::StrReplaceAll(text, {{secret_, "[redacted API key]"}});
}

absl::Status ApiKey::Redact(const absl::Status& status) const {
  if (secret_.empty() || !absl::StrContains(status.message(), secret_)) {
    return status;
  }
  return absl::Status(status.code(), Redact(status.message()));
}

}  // namespace sdg
