// llmsim and sdgd started as real processes on free loopback ports, the way
// an operator runs them; stopped (and reaped) when the Stack is destroyed.
#ifndef SDG_TESTS_E2E_STACK_H_
#define SDG_TESTS_E2E_STACK_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tests/testing/subprocess.h"

namespace sdg::testing {

struct StackOptions {
  std::vector<std::string> llmsim_args;  // beyond --listen and --model
  std::vector<std::string> sdgd_args;    // beyond --listen and --backend
  // Extra backends for sdgd, as NAME=URL; the llmsim one is "sim".
  std::vector<std::string> extra_backends;
  // More backend names for the same llmsim (e.g. with other flags).
  std::vector<std::string> llmsim_aliases;
  // sdgd's gRPC port; 0 picks one. RestartSdgd keeps it either way.
  int sdgd_port = 0;
  // sdgd starts first and llmsim only at StartLlmsimLate (on a port chosen
  // now): a model server that comes up after sdgd, as on Kubernetes.
  bool llmsim_starts_late = false;
};

// What a second sdgd logs once it waits as a standby for the replica lease.
inline constexpr absl::string_view kStandbyWaits =
    "\"msg\":\"standby: another replica";

class Stack {
 public:
  static absl::StatusOr<std::unique_ptr<Stack>> Start(
      const StackOptions& options);

  // The gRPC target of sdgd: its address, or with a standby on a port of
  // its own both, as one target ("ipv4:127.0.0.1:A,127.0.0.1:B"): a client
  // connects to the one that listens.
  std::string address() const;
  std::string metrics_url() const;
  std::string llmsim_url() const;  // without /v1
  const std::string& dir() const { return dir_; }
  Subprocess& sdgd() { return *sdgd_; }
  Subprocess& llmsim() { return *llmsim_; }
  // Every sdgd's log so far, oldest first.
  std::string SdgdLog() const;
  std::string state_dir() const { return dir_ + "/state"; }

  // Sends sdgd `signal_number` (SIGKILL: a crash; SIGTERM: a shutdown),
  // waits for it to exit and starts it again on the same port and
  // state_dir. Returns the old process's wait status.
  // `while_stopped` runs between the two (to damage the state_dir, say).
  absl::StatusOr<int> RestartSdgd(
      int signal_number, std::function<void()> while_stopped = nullptr);

  // With the PostgreSQL store: starts a second sdgd on the same flags (its
  // own metrics port) and returns once it logs `awaited` (by default, that
  // it waits as a standby for the replica lease). Returns the base URL of
  // its probes and /metrics.
  // With `own_port`, the standby listens on a port of its own once it takes
  // over, and address() names both (a compose file's two replicas);
  // otherwise on the port of the sdgd it replaces (a Service in front).
  absl::StatusOr<std::string> StartStandby(
      absl::string_view awaited = kStandbyWaits, bool own_port = false);
  // Waits until the last sdgd started logs `text`; else `failure` and that
  // log.
  absl::Status AwaitInLastLog(absl::string_view text,
                              absl::string_view failure) const;
  // After StartStandby: pauses the standby (SIGSTOP), sends the active sdgd
  // `signal_number`, waits for it to exit, runs `while_stopped`, and lets
  // the standby go on (SIGCONT) until it has taken the lease and listens on
  // the same port: it is this stack's sdgd from then on. Returns the old
  // process's wait status. With SIGSTOP (a replica frozen, or cut off,
  // past its lease) the old sdgd is let go on (SIGCONT) once the standby
  // has taken the lease, and its exit status is returned.
  absl::StatusOr<int> FailOverToStandby(
      int signal_number, std::function<void()> while_stopped = nullptr);

  // Stops llmsim (SIGTERM), runs `while_stopped`, and starts it again on the
  // same port: a model server restarted under a running job. With
  // `llmsim_args`, those replace StackOptions::llmsim_args.
  absl::Status RestartLlmsim(
      std::function<void()> while_stopped,
      std::optional<std::vector<std::string>> llmsim_args = std::nullopt);
  // With StackOptions::llmsim_starts_late: starts llmsim on its port.
  absl::Status StartLlmsimLate();

  // Runs sdgctl with --server set.
  CommandResult Sdgctl(std::vector<std::string> args) const;
  // Starts sdgctl with --server set; its stderr goes to `stderr_path`.
  absl::StatusOr<std::unique_ptr<Subprocess>> StartSdgctl(
      std::vector<std::string> args, const std::string& stderr_path) const;
  // llmsim's /stats, parsed.
  std::string LlmsimStats() const;

 private:
  // Starts sdgd on sdgd_argv_ with its own log file, and waits until it
  // listens.
  absl::Status StartSdgd();
  absl::StatusOr<std::unique_ptr<Subprocess>> StartSdgdProcess(
      const std::vector<std::string>& argv);
  absl::Status AwaitSdgdListening();
  // A restarted sdgd or a standby listens on the port the first one took.
  void KeepTheSdgdPort();
  absl::Status StartLlmsim();
  // `sdgctl ARGS... --server=ADDRESS`.
  std::vector<std::string> SdgctlArgv(std::vector<std::string> args) const;

  std::string dir_;
  std::unique_ptr<Subprocess> llmsim_;
  std::unique_ptr<Subprocess> sdgd_;
  std::unique_ptr<Subprocess> standby_;  // StartStandby's, until it takes over
  std::vector<std::string> llmsim_argv_;
  int llmsim_starts_ = 0;
  std::vector<std::string> sdgd_argv_;
  std::vector<std::string> sdgd_logs_;  // one per start, oldest first
  int port_ = 0;
  int standby_port_ = 0;  // StartStandby's own port, if it was given one
  int metrics_port_ = 0;
  int llmsim_port_ = 0;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_E2E_STACK_H_
