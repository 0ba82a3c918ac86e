#include "server/api/authenticator.h"

#include <openssl/crypto.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/read_file.h"
#include "base/sha256.h"

namespace sdg {
namespace {

constexpr char kHowToSend[] =
    "send the metadata \"authorization: Bearer TOKEN\" (sdgctl: "
    "--token_file or SDG_TOKEN)";

}  // namespace

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(
    const Options& options, Metrics& metrics) {
  if (!options.tokens_file.empty() &&
      !IsValidTenantName(options.admin_tenant)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--admin_tenant \"", options.admin_tenant,
                     "\" is not a valid tenant name"));
  }
  std::unique_ptr<Authenticator> authenticator(
      new Authenticator(options, metrics));
  if (!authenticator->enabled()) return authenticator;
  absl::MutexLock lock(&authenticator->mu_);
  authenticator->read_version_ = authenticator->CurrentVersion();
  absl::StatusOr<std::vector<TenantToken>> tokens = authenticator->ReadTokens();
  if (!tokens.ok()) return tokens.status();
  authenticator->tokens_ = *std::move(tokens);
  Log(LogLevel::kInfo, "authentication on",
      {{"tokens_file", options.tokens_file},
       {"tokens", static_cast<int64_t>(authenticator->tokens_.size())}});
  return authenticator;
}

Authenticator::FileVersion Authenticator::CurrentVersion() const {
  struct stat info;
  if (::stat(options_.tokens_file.c_str(), &info) != 0) return FileVersion{};
  return FileVersion{
      info.st_dev,
      info.st_ino,
      info.st_size,
      static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 +
          info.st_mtim.tv_nsec,
      static_cast<int64_t>(info.st_ctim.tv_sec) * 1'000'000'000 +
          info.st_ctim.tv_nsec,
  };
}

absl::StatusOr<std::vector<TenantToken>> Authenticator::ReadTokens() const {
  const std::string& path = options_.tokens_file;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  absl::StatusOr<std::vector<TenantToken>> tokens =
      text.ok() ? ParseTokensFile(*text) : text.status();
  if (!tokens.ok()) {
    return absl::Status(tokens.status().code(),
                        absl::StrCat("--auth_tokens_file ", path, ": ",
                                     tokens.status().message()));
  }
  return tokens;
}

void Authenticator::ReloadIfChangedLocked() {
  const FileVersion version = CurrentVersion();
  if (version == read_version_) return;
  // Once per version of the file, not once per call, whatever it holds.
  read_version_ = version;
  absl::StatusOr<std::vector<TenantToken>> tokens = ReadTokens();
  if (!tokens.ok()) {
    metrics_.TokensFileReloaded(false);
    Log(LogLevel::kError,
        "auth tokens file unreadable or invalid; keeping the tokens read "
        "before",
        {{"error", std::string(tokens.status().message())}});
    return;
  }
  metrics_.TokensFileReloaded(true);
  Log(LogLevel::kInfo, "auth tokens file reloaded",
      {{"tokens", static_cast<int64_t>(tokens->size())}});
  tokens_ = *std::move(tokens);
}

std::optional<std::string> Authenticator::TenantOfLocked(
    absl::string_view digest) const {
  // Every entry is compared, and CRYPTO_memcmp takes the same time for any
  // two digests: how long this takes says nothing of how close a guess is.
  const TenantToken* found = nullptr;
  for (const TenantToken& token : tokens_) {
    if (token.token_digest.size() == digest.size() &&
        CRYPTO_memcmp(token.token_digest.data(), digest.data(),
                      digest.size()) == 0) {
      found = &token;
    }
  }
  if (found == nullptr) return std::nullopt;
  return found->tenant;
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    std::optional<absl::string_view> authorization) {
  if (!enabled()) return Caller{"", true};
  if (!authorization.has_value()) {
    metrics_.AuthFailed("missing");
    return absl::UnauthenticatedError(
        absl::StrCat("this server requires a token; ", kHowToSend));
  }
  absl::string_view value = absl::StripAsciiWhitespace(*authorization);
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    metrics_.AuthFailed("malformed");
    return absl::UnauthenticatedError(absl::StrCat(
        "the authorization metadata is not \"Bearer TOKEN\"; ", kHowToSend));
  }
  const absl::string_view token =
      absl::StripLeadingAsciiWhitespace(value.substr(kScheme.size()));
  const std::string digest = absl::HexStringToBytes(Sha256Hex(token));
  absl::MutexLock lock(&mu_);
  ReloadIfChangedLocked();
  std::optional<std::string> tenant = TenantOfLocked(digest);
  if (!tenant.has_value()) {
    metrics_.AuthFailed("unknown_token");
    return absl::UnauthenticatedError(
        "the token is not in this server's --auth_tokens_file (revoked, or "
        "mistyped); ask the operator for a token");
  }
  Caller caller;
  caller.admin = *tenant == options_.admin_tenant;
  caller.tenant = *std::move(tenant);
  return caller;
}

}  // namespace sdg
