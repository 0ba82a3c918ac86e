// The few POSIX file operations the job store needs, with errors that name
// the path and say what to do.
#ifndef SDG_SERVER_JOBS_FILE_UTIL_H_
#define SDG_SERVER_JOBS_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

// `errno` of a failed `operation` on `path` as a status: disk full is
// RESOURCE_EXHAUSTED, a read-only or unwritable place FAILED_PRECONDITION,
// anything else INTERNAL.
absl::Status FileError(absl::string_view operation, const std::string& path,
                       int error);

// Writes all of `data` at the fd's position.
absl::Status WriteAll(int fd, absl::string_view data, const std::string& path);
// Reads exactly `size` bytes at `offset` (fewer only at the end of the file).
absl::StatusOr<size_t> ReadAt(int fd, int64_t offset, size_t size, char* out,
                              const std::string& path);
// fsync of a directory, so that a rename or a new file in it is durable.
absl::Status SyncDirectory(const std::string& dir);
// mkdir -p.
absl::Status MakeDirectories(const std::string& dir);
// rm -rf; a missing path is fine.
absl::Status RemoveTree(const std::string& path);

// Closes an fd when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  ~UniqueFd();
  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_FILE_UTIL_H_
