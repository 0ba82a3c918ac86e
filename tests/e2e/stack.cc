#include "tests/e2e/stack.h"

#include <signal.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/testing/eventually.h"
#include "tests/testing/free_port.h"
#include "tests/testing/http_get.h"

namespace sdg::testing {

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

absl::StatusOr<std::unique_ptr<Stack>> Stack::Start(
    const StackOptions& options) {
  auto stack = std::make_unique<Stack>();
  stack->dir_ = MakeTempDir();

  std::vector<std::string>& llmsim = stack->llmsim_argv_;
  llmsim = {LLMSIM_PATH, "--listen=127.0.0.1:0", "--model=m"};
  llmsim.insert(llmsim.end(), options.llmsim_args.begin(),
                options.llmsim_args.end());
  if (options.llmsim_starts_late) {
    stack->llmsim_port_ = FreeLoopbackPort();
    llmsim[1] = absl::StrCat("--listen=127.0.0.1:", stack->llmsim_port_);
  } else if (absl::Status started = stack->StartLlmsim(); !started.ok()) {
    return started;
  }

  std::vector<std::string>& sdgd = stack->sdgd_argv_;
  sdgd = {SDGD_PATH, absl::StrCat("--listen=127.0.0.1:", options.sdgd_port),
          "--metrics_listen=127.0.0.1:0",
          absl::StrCat("--backend=sim=", stack->llmsim_url(), "/v1"),
          absl::StrCat("--state_dir=", stack->state_dir())};
  for (const std::string& extra : options.extra_backends) {
    sdgd.push_back("--backend=" + extra);
  }
  for (const std::string& alias : options.llmsim_aliases) {
    sdgd.push_back(
        absl::StrCat("--backend=", alias, "=", stack->llmsim_url(), "/v1"));
  }
  sdgd.insert(sdgd.end(), options.sdgd_args.begin(), options.sdgd_args.end());
  if (absl::Status started = stack->StartSdgd(); !started.ok()) return started;
  return stack;
}

absl::Status Stack::StartLlmsim() {
  auto sim = Subprocess::Start(
      llmsim_argv_,
      absl::StrCat(dir_, "/llmsim",
                   llmsim_starts_ == 0 ? "" : absl::StrCat(".", llmsim_starts_),
                   ".log"));
  ++llmsim_starts_;
  if (!sim.ok()) return sim.status();
  llmsim_ = *std::move(sim);
  auto line =
      llmsim_->ReadLineStartingWith("llmsim listening on", kStartTimeout);
  if (!line.ok()) return line.status();
  llmsim_port_ = PortFromLine(*line);
  return absl::OkStatus();
}

absl::Status Stack::StartLlmsimLate() { return StartLlmsim(); }

absl::Status Stack::RestartLlmsim(
    std::function<void()> while_stopped,
    std::optional<std::vector<std::string>> llmsim_args) {
  llmsim_->Signal(SIGTERM);
  llmsim_->Wait();
  if (while_stopped) while_stopped();
  llmsim_argv_[1] = absl::StrCat("--listen=127.0.0.1:", llmsim_port_);
  if (llmsim_args.has_value()) {
    llmsim_argv_.resize(3);  // llmsim, --listen, --model
    llmsim_argv_.insert(llmsim_argv_.end(), llmsim_args->begin(),
                        llmsim_args->end());
  }
  return StartLlmsim();
}

absl::Status Stack::StartSdgd() {
  absl::StatusOr<std::unique_ptr<Subprocess>> server =
      StartSdgdProcess(sdgd_argv_);
  if (!server.ok()) return server.status();
  sdgd_ = *std::move(server);
  return AwaitSdgdListening();
}

absl::StatusOr<std::unique_ptr<Subprocess>> Stack::StartSdgdProcess(
    const std::vector<std::string>& argv) {
  // One log per start, so that a restart keeps the previous one.
  sdgd_logs_.push_back(absl::StrCat(
      dir_, "/sdgd",
      sdgd_logs_.empty() ? "" : absl::StrCat(".", sdgd_logs_.size()), ".log"));
  return Subprocess::Start(argv, sdgd_logs_.back());
}

absl::Status Stack::AwaitSdgdListening() {
  auto line = sdgd_->ReadLineStartingWith("sdgd listening on", kStartTimeout);
  if (!line.ok()) {
    return absl::Status(
        line.status().code(),
        absl::StrCat(line.status().message(), "; sdgd log:\n", SdgdLog()));
  }
  port_ = PortFromLine(*line);
  line = sdgd_->ReadLineStartingWith("sdgd metrics on", kStartTimeout);
  if (!line.ok()) return line.status();
  metrics_port_ = PortFromLine(*line);
  return absl::OkStatus();
}

void Stack::KeepTheSdgdPort() {
  for (std::string& arg : sdgd_argv_) {
    if (absl::StartsWith(arg, "--listen=")) {
      arg = absl::StrCat("--listen=127.0.0.1:", port_);
    }
  }
}

absl::StatusOr<int> Stack::RestartSdgd(int signal_number,
                                       std::function<void()> while_stopped) {
  sdgd_->Signal(signal_number);
  const int status = sdgd_->Wait();
  if (while_stopped) while_stopped();
  // The new sdgd takes the same port (when the options fixed it) and the
  // same state_dir.
  KeepTheSdgdPort();
  if (absl::Status started = StartSdgd(); !started.ok()) return started;
  return status;
}

absl::Status Stack::AwaitInLastLog(absl::string_view text,
                                   absl::string_view failure) const {
  const std::string& log = sdgd_logs_.back();
  if (Eventually([&] { return absl::StrContains(ReadFile(log), text); },
                 kStartTimeout)) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(
      absl::StrCat(failure, "; its log:\n", ReadFile(log)));
}

std::string Stack::address() const {
  if (standby_port_ == 0 || standby_port_ == port_) {
    return "127.0.0.1:" + std::to_string(port_);
  }
  return absl::StrCat("ipv4:127.0.0.1:", port_, ",127.0.0.1:", standby_port_);
}

absl::StatusOr<std::string> Stack::StartStandby(absl::string_view awaited,
                                                bool own_port) {
  KeepTheSdgdPort();
  // The standby's metrics port is chosen here: it says which only once it
  // is active.
  const int metrics_port = FreeLoopbackPort();
  std::vector<std::string> argv = sdgd_argv_;
  if (own_port) standby_port_ = FreeLoopbackPort();
  for (std::string& arg : argv) {
    if (absl::StartsWith(arg, "--metrics_listen=")) {
      arg = absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port);
    }
    if (own_port && absl::StartsWith(arg, "--listen=")) {
      arg = absl::StrCat("--listen=127.0.0.1:", standby_port_);
    }
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> standby = StartSdgdProcess(argv);
  if (!standby.ok()) return standby.status();
  standby_ = *std::move(standby);
  if (absl::Status waiting = AwaitInLastLog(
          awaited, absl::StrCat("the second sdgd never logged ", awaited));
      !waiting.ok()) {
    return waiting;
  }
  return absl::StrCat("http://127.0.0.1:", metrics_port);
}

absl::StatusOr<int> Stack::FailOverToStandby(
    int signal_number, std::function<void()> while_stopped) {
  if (standby_ == nullptr) {
    return absl::FailedPreconditionError("no standby: call StartStandby");
  }
  standby_->Signal(SIGSTOP);
  sdgd_->Signal(signal_number);
  const bool frozen = signal_number == SIGSTOP;
  int status = frozen ? 0 : sdgd_->Wait();
  if (while_stopped) while_stopped();
  standby_->Signal(SIGCONT);
  if (frozen) {
    // The frozen replica wakes once the standby has taken its lease, and
    // must find itself fenced out.
    if (absl::Status taken =
            AwaitInLastLog("\"msg\":\"replica lease taken",
                           "the standby never took the frozen replica's lease");
        !taken.ok()) {
      return taken;
    }
    sdgd_->Signal(SIGCONT);
    status = sdgd_->Wait();
  }
  sdgd_ = std::move(standby_);
  if (absl::Status listening = AwaitSdgdListening(); !listening.ok()) {
    return listening;
  }
  return status;
}

std::string Stack::metrics_url() const {
  return absl::StrCat("http://127.0.0.1:", metrics_port_, "/metrics");
}

std::string Stack::llmsim_url() const {
  return absl::StrCat("http://127.0.0.1:", llmsim_port_);
}

std::string Stack::SdgdLog() const {
  std::string text;
  for (const std::string& path : sdgd_logs_) text += ReadFile(path);
  return text;
}

std::vector<std::string> Stack::SdgctlArgv(
    std::vector<std::string> args) const {
  args.insert(args.begin(), SDGCTL_PATH);
  args.push_back("--server=" + address());
  return args;
}

CommandResult Stack::Sdgctl(std::vector<std::string> args) const {
  return RunCommand(SdgctlArgv(std::move(args)));
}

absl::StatusOr<std::unique_ptr<Subprocess>> Stack::StartSdgctl(
    std::vector<std::string> args, const std::string& stderr_path) const {
  return Subprocess::Start(SdgctlArgv(std::move(args)), stderr_path);
}

std::string Stack::LlmsimStats() const {
  absl::StatusOr<std::string> stats = HttpGet(llmsim_url() + "/stats");
  return stats.ok() ? *stats : "{}";
}

}  // namespace sdg::testing
