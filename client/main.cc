// sdgctl: the command-line client of sdgd. Parses flags and dispatches to the
// commands in this directory's library.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/signal_watcher.h"
#include "client/generate.h"
#include "client/job_commands.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "sdgd address, HOST:PORT");
ABSL_FLAG(std::string, input, "", "generate: input dataset, JSON lines");
ABSL_FLAG(std::string, output, "", "generate: output file, JSON lines");
ABSL_FLAG(std::string, errors, "",
          "generate: failed rows (default OUTPUT.errors.jsonl)");
ABSL_FLAG(std::string, block, "",
          "generate: block file (JSON, Block's fields)");
ABSL_FLAG(std::string, template, "",
          "generate: prompt template with {{column}} placeholders");
ABSL_FLAG(std::string, backend, "", "generate: backend name on the server");
ABSL_FLAG(std::string, model, "", "generate: model name");
ABSL_FLAG(std::string, api, "", "generate: completions or chat");
ABSL_FLAG(std::string, system_prompt, "", "generate: chat system prompt");
ABSL_FLAG(std::string, output_column, "", "generate: column for the output");
ABSL_FLAG(std::string, job_id, "", "generate: job id (default: server-made)");
ABSL_FLAG(int, batch_size, 0, "generate: rows per shard (0: server default 8)");
ABSL_FLAG(int, num_workers, 0,
          "generate: shards in progress at once (0: server default)");
ABSL_FLAG(std::optional<int>, max_tokens, std::nullopt,
          "generate: max tokens per sample");
ABSL_FLAG(std::optional<double>, temperature, std::nullopt,
          "generate: sampling temperature");
ABSL_FLAG(std::optional<double>, top_p, std::nullopt, "generate: top_p");
ABSL_FLAG(std::optional<int64_t>, seed, std::nullopt,
          "generate: sampling seed");
ABSL_FLAG(std::optional<int>, n, std::nullopt, "generate: samples per row");
ABSL_FLAG(bool, fail_fast, false,
          "generate: cancel the job at its first failed shard");
ABSL_FLAG(std::optional<absl::Duration>, timeout, std::nullopt,
          "generate: limit on the job's run time, e.g. 30m");

namespace {

constexpr char kUsage[] =
    "sdgctl COMMAND [flags]\n"
    "  generate --input IN.jsonl --output OUT.jsonl "
    "(--template TEXT | --block BLOCK.json) [--model M] [--backend NAME]\n"
    "           [--api completions|chat] [--batch_size N] [--num_workers N] "
    "[--max_tokens N] [--temperature T] [--seed S] [--n N] [--fail_fast]\n"
    "  jobs                 list running and recent jobs\n"
    "  get JOB_ID           show one job\n"
    "  cancel JOB_ID        cancel a job\n"
    "Every command takes --server HOST:PORT (default 127.0.0.1:50051).";

int Fail(const absl::Status& status) {
  std::cerr << "sdgctl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<sdg::GenerateOptions> GenerateOptionsFromFlags() {
  sdg::GenerateOptions options;
  options.input_path = absl::GetFlag(FLAGS_input);
  options.output_path = absl::GetFlag(FLAGS_output);
  options.errors_path = absl::GetFlag(FLAGS_errors);
  if (options.input_path.empty() || options.output_path.empty()) {
    return absl::InvalidArgumentError("generate needs --input and --output");
  }
  if (!absl::GetFlag(FLAGS_block).empty()) {
    absl::StatusOr<sdg::v1::Block> block =
        sdg::LoadBlockFile(absl::GetFlag(FLAGS_block));
    if (!block.ok()) return block.status();
    options.block = *std::move(block);
  }
  // Flags override the block file's fields.
  sdg::v1::Block& block = options.block;
  if (std::string v = absl::GetFlag(FLAGS_template); !v.empty()) {
    block.set_prompt_template(v);
  }
  if (std::string v = absl::GetFlag(FLAGS_backend); !v.empty())
    block.set_backend(v);
  if (std::string v = absl::GetFlag(FLAGS_model); !v.empty())
    block.set_model(v);
  if (std::string v = absl::GetFlag(FLAGS_system_prompt); !v.empty()) {
    block.set_system_prompt(v);
  }
  if (std::string v = absl::GetFlag(FLAGS_output_column); !v.empty()) {
    block.set_output_column(v);
  }
  if (std::string api = absl::GetFlag(FLAGS_api); !api.empty()) {
    if (api == "completions") {
      block.set_api(sdg::v1::API_COMPLETIONS);
    } else if (api == "chat") {
      block.set_api(sdg::v1::API_CHAT);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--api must be completions or chat, got \"", api, "\""));
    }
  }
  if (auto v = absl::GetFlag(FLAGS_max_tokens)) block.set_max_tokens(*v);
  if (auto v = absl::GetFlag(FLAGS_temperature)) block.set_temperature(*v);
  if (auto v = absl::GetFlag(FLAGS_top_p)) block.set_top_p(*v);
  if (auto v = absl::GetFlag(FLAGS_seed)) block.set_seed(*v);
  if (auto v = absl::GetFlag(FLAGS_n)) block.set_n(*v);
  if (block.prompt_template().empty()) {
    return absl::InvalidArgumentError(
        "generate needs --template or a --block file with prompt_template");
  }
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.fail_fast = absl::GetFlag(FLAGS_fail_fast);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  return options;
}

// The generate call in progress, which Ctrl-C cancels (and with it the job on
// the server). Without one, Ctrl-C exits at once.
class InterruptTarget {
 public:
  void Set(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    context_ = context;
  }
  void Interrupt() {
    absl::MutexLock lock(&mu_);
    if (context_ == nullptr) std::_Exit(130);
    std::cerr << "\nsdgctl: cancelling the job\n";
    context_->TryCancel();
  }

 private:
  absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

int Generate(sdg::v1::GenerationService::Stub& stub,
             InterruptTarget& interrupt) {
  absl::StatusOr<sdg::GenerateOptions> options = GenerateOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());

  grpc::ClientContext context;
  interrupt.Set(&context);
  absl::StatusOr<sdg::GenerateSummary> summary =
      sdg::RunGenerate(stub, context, *options, std::cerr);
  interrupt.Set(nullptr);
  if (!summary.ok()) return Fail(summary.status());
  std::cerr << sdg::FormatSummary(*summary, options->output_path) << "\n";
  return summary->AllRowsSucceeded() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << kUsage << "\n";
    return 2;
  }
  const std::string command = args[1];
  // Before gRPC starts any thread, so that they all inherit the signal mask.
  InterruptTarget interrupt;
  sdg::SignalWatcher signals([&interrupt](int) { interrupt.Interrupt(); });
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_server),
                                     grpc::InsecureChannelCredentials());
  sdg::v1::GenerationService::Stub stub(channel);

  if (command == "generate" && args.size() == 2)
    return Generate(stub, interrupt);
  if (command == "jobs" && args.size() == 2) {
    absl::Status status = sdg::ListJobsCommand(stub, std::cout);
    return status.ok() ? 0 : Fail(status);
  }
  if ((command == "get" || command == "cancel") && args.size() == 3) {
    absl::Status status = command == "get"
                              ? sdg::GetJobCommand(stub, args[2], std::cout)
                              : sdg::CancelJobCommand(stub, args[2], std::cout);
    if (status.ok()) std::cout << "\n";
    return status.ok() ? 0 : Fail(status);
  }
  std::cerr << kUsage << "\n";
  return 2;
}
