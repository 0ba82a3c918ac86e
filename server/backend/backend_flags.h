// sdgd's per-backend flags. Each is repeatable and takes NAME=VALUE for one
// backend or a bare VALUE for every backend (a later flag wins):
//   --backend NAME=URL[,URL...]
//   --backend_batching [NAME=]auto|on|off
//   --backend_max_in_flight [NAME=]N|auto|adaptive
//   --backend_api_key_file NAME=PATH   (else env SDG_BACKEND_API_KEY_<NAME>)
#ifndef SDG_SERVER_BACKEND_BACKEND_FLAGS_H_
#define SDG_SERVER_BACKEND_BACKEND_FLAGS_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/environment.h"
#include "server/backend/backend.h"

namespace sdg {

// Parses "NAME=URL[,URL...]". Names are [A-Za-z0-9_-]+; URLs are http(s) and
// lose a trailing slash.
absl::StatusOr<BackendOptions> ParseBackendFlag(absl::string_view flag);

struct BackendFlags {
  std::vector<std::string> backend;
  std::vector<std::string> batching;
  std::vector<std::string> max_in_flight;
  std::vector<std::string> api_key_file;
  std::vector<std::string> rate_limit;
  // Applied to every backend.
  BackendOptions defaults;
};

// The environment variable holding NAME's API key: SDG_BACKEND_API_KEY_ and
// NAME upper-cased with '-' as '_'.
std::string ApiKeyEnvVar(absl::string_view backend_name);

// INVALID_ARGUMENT naming the flag and the reason for anything malformed, a
// per-backend value for an unknown backend, or an unreadable key file.
absl::StatusOr<std::vector<BackendOptions>> BackendsFromFlags(
    const BackendFlags& flags, const GetEnv& getenv);

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_BACKEND_FLAGS_H_
