#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace sdg::testing {
namespace {

std::vector<char*> ArgvPointers(const std::vector<std::string>& argv) {
  std::vector<char*> pointers;
  for (const std::string& arg : argv)
    pointers.push_back(const_cast<char*>(arg.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int stdout_fd,
                            const std::string& stderr_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO,
                                     stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  // The child starts with no blocked signals, whatever the test runner has.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  std::vector<char*> args = ArgvPointers(argv);
  int rc =
      posix_spawn(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, const std::string& stderr_path) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  absl::StatusOr<pid_t> pid = Spawn(argv, fds[1], stderr_path);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  return std::unique_ptr<Subprocess>(new Subprocess(*pid, fds[0]));
}

Subprocess::~Subprocess() {
  if (!exit_code_.has_value()) {
    kill(pid_, SIGKILL);
    Wait();
  }
  close(stdout_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLineStartingWith(
    absl::string_view prefix, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t newline;
    while ((newline = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      if (absl::StartsWith(line, prefix)) return line;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line starting with \"", prefix, "\" on stdout"));
    }
    pollfd fd{stdout_fd_, POLLIN, 0};
    int ready =
        poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[4096];
    ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat(
          "stdout closed before a line starting with \"", prefix, "\""));
    }
    buffer_.append(chunk, n);
  }
}

std::string Subprocess::ReadRest() {
  char chunk[4096];
  ssize_t n;
  while ((n = read(stdout_fd_, chunk, sizeof(chunk))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    buffer_.append(chunk, n);
  }
  return std::exchange(buffer_, "");
}

void Subprocess::Signal(int signal_number) {
  if (!exit_code_.has_value()) kill(pid_, signal_number);
}

int Subprocess::Wait() {
  if (exit_code_.has_value()) return *exit_code_;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = ExitCode(status);
  return *exit_code_;
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  std::string dir = MakeTempDir();
  std::string out_path = dir + "/stdout";
  std::string err_path = dir + "/stderr";
  CommandResult result;
  int out_fd =
      open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  absl::StatusOr<pid_t> pid = Spawn(argv, out_fd, err_path);
  close(out_fd);
  if (!pid.ok()) {
    result.err = std::string(pid.status().message());
    return result;
  }
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = ExitCode(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

int PortFromLine(absl::string_view line) {
  size_t colon = line.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(line.substr(colon + 1), &port)) {
    return 0;
  }
  return port;
}

namespace {

// One directory under which MakeTempDir makes every other of this process,
// removed when the process exits (static destructors run after main
// returns), so that a test run leaves nothing behind. A child forked
// without exec that exits does not remove it.
class TempRoot {
 public:
  TempRoot() {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern =
        absl::StrCat(base != nullptr ? base : "/tmp", "/sdg-test-XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = std::move(pattern);
  }
  ~TempRoot() {
    if (path_.empty() || ::getpid() != owner_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;  // empty if it could not be made
  const pid_t owner_ = ::getpid();
};

}  // namespace

std::string MakeTempDir() {
  static const TempRoot root;
  if (root.path().empty()) return "/tmp";
  std::string pattern = root.path() + "/XXXXXX";
  char* made = mkdtemp(pattern.data());
  return made != nullptr ? std::string(made) : root.path();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

}  // namespace sdg::testing
