// Starts a program as a child process for end-to-end tests, reads its stdout
// line by line, signals it and reaps it. Every child is stopped (SIGKILL) and
// reaped when its Subprocess is destroyed, so a failing test leaves nothing
// running.
#ifndef SDG_TESTS_TESTING_SUBPROCESS_H_
#define SDG_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sdg::testing {

class Subprocess {
 public:
  // stdout is piped to us; stderr goes to `stderr_path` (or is inherited when
  // empty, so it shows in the test log).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv,
      const std::string& stderr_path = "");
  ~Subprocess();

  pid_t pid() const { return pid_; }

  // Reads stdout until a line starts with `prefix` and returns that line.
  // Fails if the process closes stdout first or `timeout` passes (a
  // generous bound so a broken build fails rather than hangs).
  absl::StatusOr<std::string> ReadLineStartingWith(absl::string_view prefix,
                                                   absl::Duration timeout);
  // Everything remaining on stdout, until the process closes it.
  std::string ReadRest();

  void Signal(int signal_number);
  // Reaps the process: its exit code, or 128 + the signal that killed it.
  int Wait();

 private:
  Subprocess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}

  pid_t pid_;
  int stdout_fd_;
  std::string buffer_;
  std::optional<int> exit_code_;
};

// Runs a command to completion: its exit code, stdout and stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult RunCommand(const std::vector<std::string>& argv);

// The port at the end of a "... listening on HOST:PORT" line.
int PortFromLine(absl::string_view line);

// A fresh directory under the test's temporary directory ($TEST_TMPDIR or
// /tmp), inside one for the whole process that is removed when it exits.
std::string MakeTempDir();
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_SUBPROCESS_H_
