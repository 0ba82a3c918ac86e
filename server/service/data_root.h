// Where a request's dataset_path may point: files under --data_root, read by
// sdgd and copied into the job store at admission. With tenants (a tokens
// file) every tenant has a folder of its own, --data_root/<tenant>/, and
// names files relative to it; the admin tenant names any path under
// --data_root; a shared folder (--data_root_shared), if the operator names
// one, is readable by every tenant as "<shared>/...". A path that leads
// anywhere else is NOT_FOUND with the words of a missing file, so that a
// refusal never tells a tenant that another tenant's file exists.
#ifndef SDG_SERVER_SERVICE_DATA_ROOT_H_
#define SDG_SERVER_SERVICE_DATA_ROOT_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/service/caller.h"

namespace sdg {

class DataRoot {
 public:
  struct Options {
    // Empty refuses every dataset_path.
    std::string root;
    // A folder under `root` every tenant may read ("" for none).
    std::string shared = "";
  };

  explicit DataRoot(Options options) : options_(std::move(options)) {}

  // The file `path` names for `caller`, made absolute (symlinks resolved).
  // Without tenants (caller.tenant empty) as before tenants existed: a path
  // relative to the root or absolute inside it; ".." is INVALID_ARGUMENT and
  // a path leading outside PERMISSION_DENIED.
  absl::StatusOr<std::string> Resolve(const std::string& path,
                                      const Caller& caller) const;

 private:
  // `root`: the root with its symlinks resolved.
  absl::StatusOr<std::string> ResolveForTenant(const std::string& path,
                                               const Caller& caller,
                                               const std::string& root) const;

  const Options options_;
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_DATA_ROOT_H_
