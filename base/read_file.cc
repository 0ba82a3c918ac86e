#include "base/read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace sdg {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  auto failure = [&path](int error) {
    return absl::ErrnoToStatus(
        error, absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failure(errno);
  std::string contents;
  char buffer[16 << 10];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return failure(error);
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace sdg
