#include "server/store/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace sdg {

absl::Status FileError(absl::string_view operation, const std::string& path,
                       int error) {
  std::string message =
      absl::StrCat(operation, " ", path, ": ", std::strerror(error));
  switch (error) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, "; free space on the state_dir's volume"));
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOTDIR:
      return absl::FailedPreconditionError(
          absl::StrCat(message, "; sdgd needs to write under its --state_dir"));
    default:
      return absl::InternalError(message);
  }
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReadAt(int fd, int64_t offset, size_t size, char* out,
                              const std::string& path) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out + done, size - done, offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("read", path, errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::Status SyncDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("open", dir, errno);
  if (::fsync(fd.get()) != 0) return FileError("fsync", dir, errno);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return FileError("create directory", dir, error.value());
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) return FileError("remove", path, error.value());
  return absl::OkStatus();
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace sdg
