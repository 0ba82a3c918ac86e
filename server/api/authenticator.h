// Who is calling: the tenant a bearer token names, from --auth_tokens_file
// (tokens_file.h). The file is re-read when it changes (a Kubernetes Secret
// update, an operator's edit), checked on each call by its inode, size and
// times: no thread, and a change counts from the next call. A file that
// becomes unreadable or invalid keeps the tokens last read, and says so in
// the log once. Without a file, authentication is off: every caller is the
// one tenant "" and sees every job, as before tenants existed.
#ifndef SDG_SERVER_API_AUTHENTICATOR_H_
#define SDG_SERVER_API_AUTHENTICATOR_H_

#include <sys/stat.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/api/tokens_file.h"
#include "server/observability/metrics.h"
#include "server/service/caller.h"

namespace sdg {

class Authenticator {
 public:
  struct Options {
    // Empty: authentication off.
    std::string tokens_file;
    // The tenant that sees all jobs; it needs a line in the file like any
    // other.
    std::string admin_tenant = "admin";
  };

  // Fails if the file cannot be read or parsed, naming the line.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(
      const Options& options, Metrics& metrics);

  bool enabled() const { return !options_.tokens_file.empty(); }

  // `authorization`: the call's authorization metadata, if it has one.
  // UNAUTHENTICATED when it is missing, not "Bearer TOKEN", or an unknown
  // token; the message never contains the token.
  absl::StatusOr<Caller> Authenticate(
      std::optional<absl::string_view> authorization);

 private:
  // A missing file is the all-zero version.
  struct FileVersion {
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const FileVersion&) const = default;
  };

  Authenticator(const Options& options, Metrics& metrics)
      : options_(options), metrics_(metrics) {}
  FileVersion CurrentVersion() const;
  // The file's tokens; errors name the flag, the path and the line.
  absl::StatusOr<std::vector<TenantToken>> ReadTokens() const;
  // Reads the file again if it changed since it was last read (or last
  // failed); a failure keeps the tokens and is logged.
  void ReloadIfChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant whose token has this digest, comparing every entry in
  // constant time.
  std::optional<std::string> TenantOfLocked(absl::string_view digest) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Options options_;
  Metrics& metrics_;
  absl::Mutex mu_;
  std::vector<TenantToken> tokens_ ABSL_GUARDED_BY(mu_);
  // What was last read, or last tried and found invalid.
  FileVersion read_version_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_API_AUTHENTICATOR_H_
