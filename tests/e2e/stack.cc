#include "tests/e2e/stack.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/testing/http_get.h"

namespace sdg::testing {

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

absl::StatusOr<std::unique_ptr<Stack>> Stack::Start(
    const StackOptions& options) {
  auto stack = std::make_unique<Stack>();
  stack->dir_ = MakeTempDir();

  std::vector<std::string> llmsim = {LLMSIM_PATH, "--listen=127.0.0.1:0",
                                     "--model=m"};
  llmsim.insert(llmsim.end(), options.llmsim_args.begin(),
                options.llmsim_args.end());
  auto sim = Subprocess::Start(llmsim, stack->dir_ + "/llmsim.log");
  if (!sim.ok()) return sim.status();
  stack->llmsim_ = *std::move(sim);
  auto line = stack->llmsim_->ReadLineStartingWith("llmsim listening on",
                                                   kStartTimeout);
  if (!line.ok()) return line.status();
  stack->llmsim_port_ = PortFromLine(*line);

  std::string backends =
      absl::StrCat("--backend=sim=", stack->llmsim_url(), "/v1");
  std::vector<std::string> sdgd = {SDGD_PATH, "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0", backends};
  for (const std::string& extra : options.extra_backends) {
    sdgd.push_back("--backend=" + extra);
  }
  for (const std::string& alias : options.llmsim_aliases) {
    sdgd.push_back(
        absl::StrCat("--backend=", alias, "=", stack->llmsim_url(), "/v1"));
  }
  sdgd.insert(sdgd.end(), options.sdgd_args.begin(), options.sdgd_args.end());
  auto server = Subprocess::Start(sdgd, stack->dir_ + "/sdgd.log");
  if (!server.ok()) return server.status();
  stack->sdgd_ = *std::move(server);
  line = stack->sdgd_->ReadLineStartingWith("sdgd listening on", kStartTimeout);
  if (!line.ok()) {
    return absl::Status(line.status().code(),
                        absl::StrCat(line.status().message(), "; sdgd log:\n",
                                     stack->SdgdLog()));
  }
  stack->port_ = PortFromLine(*line);
  line = stack->sdgd_->ReadLineStartingWith("sdgd metrics on", kStartTimeout);
  if (!line.ok()) return line.status();
  stack->metrics_port_ = PortFromLine(*line);
  return stack;
}

std::string Stack::metrics_url() const {
  return absl::StrCat("http://127.0.0.1:", metrics_port_, "/metrics");
}

std::string Stack::llmsim_url() const {
  return absl::StrCat("http://127.0.0.1:", llmsim_port_);
}

std::string Stack::SdgdLog() const { return ReadFile(dir_ + "/sdgd.log"); }

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
