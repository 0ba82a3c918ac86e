#include "server/service/data_root.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/quote.h"

namespace sdg {
namespace {

// `path` with symlinks resolved, or nullopt when it does not exist.
std::optional<std::string> RealPath(const std::string& path) {
  char buffer[PATH_MAX];
  if (::realpath(path.c_str(), buffer) == nullptr) return std::nullopt;
  return std::string(buffer);
}

bool IsInside(const std::string& real, const std::string& folder) {
  return absl::StartsWith(real, folder + "/");
}

bool HasDotDot(absl::string_view path) {
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") return true;
  }
  return false;
}

bool IsRegularFile(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

absl::StatusOr<std::string> DataRoot::Resolve(const std::string& path,
                                              const Caller& caller) const {
  if (options_.root.empty()) {
    return absl::FailedPreconditionError(
        "dataset_path: this server has no --data_root; upload the dataset "
        "(UploadDataset) or send its rows");
  }
  std::optional<std::string> root = RealPath(options_.root);
  if (!root.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--data_root ", options_.root, " does not exist on the server"));
  }
  if (!caller.tenant.empty() && !caller.admin) {
    return ResolveForTenant(path, caller, *root);
  }
  if (HasDotDot(path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset_path: ", Quoted(path),
                     " contains \"..\"; give a path under --data_root"));
  }
  std::optional<std::string> real =
      RealPath(path.front() == '/' ? path : absl::StrCat(*root, "/", path));
  if (!real.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset_path: no file ", Quoted(path), " under --data_root"));
  }
  if (!IsInside(*real, *root)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "dataset_path: ", Quoted(path),
        " is outside --data_root (through a symlink, or an absolute path "
        "elsewhere)"));
  }
  return *real;
}

absl::StatusOr<std::string> DataRoot::ResolveForTenant(
    const std::string& path, const Caller& caller,
    const std::string& root) const {
  const absl::Status missing = absl::NotFoundError(absl::StrCat(
      "dataset_path: no file ", Quoted(path),
      " in your folder of --data_root (", caller.tenant, "/",
      options_.shared.empty() ? ")"
                              : absl::StrCat(") nor in the shared folder (",
                                             options_.shared, "/)")));
  // A tenant names files relative to its folders: "..", an absolute path
  // and a symlink out of them lead nowhere it may read.
  if (path.empty() || path.front() == '/' || HasDotDot(path)) return missing;
  const bool shared =
      !options_.shared.empty() &&
      absl::StartsWith(path, absl::StrCat(options_.shared, "/"));
  std::optional<std::string> real =
      RealPath(shared ? absl::StrCat(root, "/", path)
                      : absl::StrCat(root, "/", caller.tenant, "/", path));
  if (!real.has_value() || !IsRegularFile(*real)) return missing;
  for (const std::string& name : {caller.tenant, options_.shared}) {
    if (name.empty()) continue;
    std::optional<std::string> folder = RealPath(absl::StrCat(root, "/", name));
    if (folder.has_value() && IsInside(*real, *folder)) return *real;
  }
  return missing;
}

}  // namespace sdg
