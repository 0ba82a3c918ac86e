// sdgctl: the command-line client of sdgd. Parses flags and dispatches to the
// commands in this directory's library.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/environment.h"
#include "base/signal_watcher.h"
#include "client/channel.h"
#include "client/estimate.h"
#include "client/generate.h"
#include "client/interrupt_target.h"
#include "client/job_commands.h"
#include "client/job_follow.h"
#include "client/pipeline_file.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "sdgd address: HOST:PORT, or any gRPC target naming several "
          "replicas (ipv4:HOST:PORT,HOST:PORT or dns:///NAME:PORT)");
ABSL_FLAG(bool, tls, false,
          "connect with TLS, verifying sdgd with the system's "
          "roots (or --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM roots to verify sdgd with (implies --tls)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for an sdgd that requires one (mTLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "the name sdgd's certificate carries, when not --server's host");
ABSL_FLAG(std::string, token_file, "",
          "file holding your token (default: the SDG_TOKEN environment "
          "variable)");
ABSL_FLAG(std::string, input, "", "generate: input dataset, JSON lines");
ABSL_FLAG(std::string, output, "", "generate: output file, JSON lines");
ABSL_FLAG(std::string, errors, "",
          "generate: failed rows (default OUTPUT.errors.jsonl)");
ABSL_FLAG(std::string, block, "",
          "generate: block file (JSON, Block's fields)");
ABSL_FLAG(std::string, pipeline, "",
          "generate: an InstructLab pipeline file (YAML) to run instead of a "
          "block; its config_path files are read relative to it");
ABSL_FLAG(int, num_instructions, 30,
          "generate --pipeline: samples per row of LLM blocks with n: scaled "
          "(InstructLab's num_instructions_to_generate)");
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
ABSL_FLAG(bool, detach, false,
          "generate: Ctrl-C leaves the job running (and says how to watch "
          "it) instead of cancelling it");
ABSL_FLAG(absl::Duration, reconnect_for, absl::Minutes(10),
          "generate, watch, output: keep reconnecting to a restarting sdgd "
          "this long");
ABSL_FLAG(bool, dry_run, false,
          "generate: print the estimate (as sdgctl estimate) and run nothing");
ABSL_FLAG(std::string, price, "",
          "estimate, generate --dry_run: IN/OUT dollars per million prompt "
          "and completion tokens (e.g. 0.15/0.60), for a cost range");
ABSL_FLAG(std::string, o, "", "output: the output file (as --output)");
ABSL_FLAG(std::string, state, "",
          "jobs: only jobs in this state (running, succeeded...)");

namespace {

using sdg::InterruptTarget;

constexpr char kUsage[] =
    "sdgctl COMMAND [flags]\n"
    "  generate --input IN.jsonl --output OUT.jsonl "
    "(--template TEXT | --block BLOCK.json) [--model M] [--backend NAME]\n"
    "           [--api completions|chat] [--batch_size N] [--num_workers N] "
    "[--max_tokens N] [--temperature T] [--seed S] [--n N] [--fail_fast]\n"
    "           [--detach]: the job survives sdgd restarts and lost "
    "connections; generate reconnects and continues.\n"
    "  generate --pipeline PIPELINE.yaml --input IN.jsonl --output OUT.jsonl "
    "[--model M] [--num_instructions N]\n"
    "           runs an InstructLab pipeline file; rows come out in "
    "InstructLab's order.\n"
    "  estimate (generate's flags, no --output) [--price IN/OUT]  rows, "
    "requests, tokens\n"
    "           and cost of the job before it runs; nothing is sent to a "
    "model (also: generate --dry_run)\n"
    "  submit (generate's flags, no --output)  create the job, print its id\n"
    "  watch JOB_ID         follow a job to its end, with progress\n"
    "  output JOB_ID -o OUT.jsonl [--errors ERR.jsonl]  its results, in "
    "row order\n"
    "  jobs [--state S]     list running and recent jobs\n"
    "  usage                what your tenant holds in the store, and its "
    "quota\n"
    "  get JOB_ID           show one job\n"
    "  cancel JOB_ID        cancel a job (its results so far are kept)\n"
    "  delete JOB_ID        remove a finished job and its results\n"
    "Every command takes --server HOST:PORT (default 127.0.0.1:50051),\n"
    "[--tls] [--tls_ca CA.pem] [--tls_cert C.pem --tls_key K.pem] "
    "[--tls_server_name NAME]\n"
    "and a token from --token_file FILE or SDG_TOKEN.";

int Fail(const absl::Status& status) {
  std::cerr << "sdgctl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

sdg::FollowOptions FollowOptionsFromFlags() {
  sdg::FollowOptions follow;
  follow.reconnect_for = absl::GetFlag(FLAGS_reconnect_for);
  return follow;
}

// `generate` needs an output file, `submit` does not.
absl::StatusOr<sdg::GenerateOptions> GenerateOptionsFromFlags(
    bool needs_output) {
  sdg::GenerateOptions options;
  options.input_path = absl::GetFlag(FLAGS_input);
  options.output_path = absl::GetFlag(FLAGS_output);
  options.errors_path = absl::GetFlag(FLAGS_errors);
  options.follow = FollowOptionsFromFlags();
  if (options.input_path.empty() ||
      (needs_output && options.output_path.empty())) {
    return absl::InvalidArgumentError(
        needs_output ? "generate needs --input and --output"
                     : "submit and estimate need --input");
  }
  if (const std::string path = absl::GetFlag(FLAGS_pipeline); !path.empty()) {
    if (!absl::GetFlag(FLAGS_block).empty() ||
        !absl::GetFlag(FLAGS_template).empty()) {
      return absl::InvalidArgumentError(
          "give --pipeline, or --block/--template, not both");
    }
    sdg::PipelineFileOptions file_options;
    file_options.backend = absl::GetFlag(FLAGS_backend);
    file_options.model = absl::GetFlag(FLAGS_model);
    if (absl::GetFlag(FLAGS_api) == "chat") {
      file_options.api = sdg::v1::API_CHAT;
    } else if (!absl::GetFlag(FLAGS_api).empty() &&
               absl::GetFlag(FLAGS_api) != "completions") {
      return absl::InvalidArgumentError(
          absl::StrCat("--api must be completions or chat, got \"",
                       absl::GetFlag(FLAGS_api), "\""));
    }
    absl::StatusOr<sdg::PipelineFile> file =
        sdg::LoadPipelineFile(path, file_options);
    if (!file.ok()) return file.status();
    for (const std::string& warning : file->warnings) {
      std::cerr << "sdgctl: warning: " << warning << "\n";
    }
    options.pipeline = std::move(file->pipeline);
    options.num_instructions_to_generate =
        absl::GetFlag(FLAGS_num_instructions);
  } else if (!absl::GetFlag(FLAGS_block).empty()) {
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
  if (!options.pipeline.has_value() && block.prompt_template().empty()) {
    return absl::InvalidArgumentError(
        "generate needs --template, a --block file with prompt_template, or "
        "--pipeline");
  }
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.fail_fast = absl::GetFlag(FLAGS_fail_fast);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  return options;
}

int Estimate(grpc::Channel& channel) {
  std::optional<sdg::TokenPrices> prices;
  if (const std::string price = absl::GetFlag(FLAGS_price); !price.empty()) {
    absl::StatusOr<sdg::TokenPrices> parsed = sdg::ParsePrices(price);
    if (!parsed.ok()) return Fail(parsed.status());
    prices = *parsed;
  }
  absl::StatusOr<sdg::GenerateOptions> options =
      GenerateOptionsFromFlags(/*needs_output=*/false);
  if (!options.ok()) return Fail(options.status());
  absl::StatusOr<sdg::v1::JobEstimate> estimate =
      sdg::EstimateJob(channel, *options);
  if (!estimate.ok()) return Fail(estimate.status());
  std::cout << sdg::FormatEstimate(*estimate, prices);
  return 0;
}

int Generate(grpc::Channel& channel, sdg::v1::GenerationService::Stub& stub,
             InterruptTarget& interrupt) {
  if (absl::GetFlag(FLAGS_dry_run)) return Estimate(channel);
  absl::StatusOr<sdg::GenerateOptions> options =
      GenerateOptionsFromFlags(/*needs_output=*/true);
  if (!options.ok()) return Fail(options.status());

  const bool detach = absl::GetFlag(FLAGS_detach);
  // Joined here with the input, the results need carry only the output
  // column; a detached job may be fetched later by `sdgctl output`, which
  // has no input: it keeps every column.
  // A pipeline's rows are its own: they come with every column.
  options->result_columns = detach || options->pipeline.has_value()
                                ? sdg::v1::RESULT_COLUMNS_ALL
                                : sdg::v1::RESULT_COLUMNS_OUTPUT_ONLY;
  sdg::CallStopper stopper;
  absl::StatusOr<sdg::GenerateSummary> summary = sdg::RunGenerate(
      channel, *options, std::cerr, stopper, [&](const std::string& job_id) {
        // The id first: with it the job can be followed from anywhere,
        // whatever happens to this call.
        std::cerr << "sdgctl: job " << job_id << " created\n";
        interrupt.Set([&stub, &stopper, job_id, detach] {
          if (detach) {
            std::cerr << "\nsdgctl: job " << job_id
                      << " keeps running; follow it with: sdgctl watch "
                      << job_id << " (results: sdgctl output " << job_id
                      << " -o FILE)\n";
            std::_Exit(130);
          }
          std::cerr << "\nsdgctl: cancelling job " << job_id
                    << " (Ctrl-C again to quit at once)\n";
          std::ostringstream job;
          if (!sdg::CancelJobCommand(stub, job_id, job).ok()) {
            stopper.Stop();
          }
        });
      });
  interrupt.Set(nullptr);
  if (!summary.ok()) return Fail(summary.status());
  std::cerr << sdg::FormatSummary(*summary, options->output_path) << "\n";
  return summary->AllRowsSucceeded() ? 0 : 1;
}

int Submit(grpc::Channel& channel) {
  absl::StatusOr<sdg::GenerateOptions> options =
      GenerateOptionsFromFlags(/*needs_output=*/false);
  if (!options.ok()) return Fail(options.status());
  absl::StatusOr<sdg::v1::Job> job = sdg::SubmitJob(channel, *options);
  if (!job.ok()) return Fail(job.status());
  std::cout << job->job_id() << "\n";
  return 0;
}

int Watch(grpc::Channel& channel, const std::string& job_id,
          InterruptTarget& interrupt) {
  sdg::CallStopper stopper;
  interrupt.Set([&stopper] { stopper.Stop(); });
  absl::StatusOr<sdg::FollowResult> followed = sdg::WatchWithProgress(
      channel, job_id, FollowOptionsFromFlags(), std::cerr, stopper);
  interrupt.Set(nullptr);
  if (!followed.ok()) return Fail(followed.status());
  if (!followed->finished.has_value()) {
    return Fail(absl::Status(
        static_cast<absl::StatusCode>(followed->status.error_code()),
        followed->status.error_message()));
  }
  const sdg::v1::JobFinished& finished = *followed->finished;
  std::cerr << "job " << job_id << " "
            << sdg::v1::JobState_Name(finished.state()) << ": "
            << finished.rows_succeeded() << " rows generated, "
            << finished.rows_failed() << " failed"
            << sdg::FormatFinishedRates(finished)
            << (finished.reason().empty() ? "" : " (" + finished.reason() + ")")
            << "\n";
  return finished.state() == sdg::v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

int Output(grpc::Channel& channel, const std::string& job_id) {
  std::string output = absl::GetFlag(FLAGS_o);
  if (output.empty()) output = absl::GetFlag(FLAGS_output);
  if (output.empty()) {
    return Fail(absl::InvalidArgumentError("output needs -o FILE"));
  }
  std::string errors = absl::GetFlag(FLAGS_errors);
  if (errors.empty()) errors = output + ".errors.jsonl";
  absl::Status status = sdg::OutputCommand(channel, job_id, output, errors,
                                           FollowOptionsFromFlags(), std::cerr);
  return status.ok() ? 0 : Fail(status);
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
  absl::StatusOr<std::string> token =
      sdg::ReadToken(absl::GetFlag(FLAGS_token_file), sdg::EnvironmentVariable);
  if (!token.ok()) return Fail(token.status());
  sdg::ChannelOptions channel_options;
  channel_options.address = absl::GetFlag(FLAGS_server);
  channel_options.tls = absl::GetFlag(FLAGS_tls);
  channel_options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  channel_options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  channel_options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  channel_options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  channel_options.token = *std::move(token);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> made =
      sdg::MakeChannel(channel_options);
  if (!made.ok()) return Fail(made.status());
  std::shared_ptr<grpc::Channel> channel = *std::move(made);
  sdg::v1::GenerationService::Stub stub(channel);

  if (command == "generate" && args.size() == 2) {
    return Generate(*channel, stub, interrupt);
  }
  if (command == "submit" && args.size() == 2) return Submit(*channel);
  if (command == "estimate" && args.size() == 2) return Estimate(*channel);
  if (command == "usage" && args.size() == 2) {
    absl::Status status = sdg::UsageCommand(stub, std::cout);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "jobs" && args.size() == 2) {
    absl::Status status =
        sdg::ListJobsCommand(stub, absl::GetFlag(FLAGS_state), std::cout);
    return status.ok() ? 0 : Fail(status);
  }
  if (args.size() == 3) {
    const std::string job_id = args[2];
    if (command == "watch") return Watch(*channel, job_id, interrupt);
    if (command == "output") return Output(*channel, job_id);
    if (command == "get" || command == "cancel" || command == "delete") {
      absl::Status status =
          command == "get" ? sdg::GetJobCommand(stub, job_id, std::cout)
          : command == "cancel"
              ? sdg::CancelJobCommand(stub, job_id, std::cout)
              : sdg::DeleteJobCommand(stub, job_id, std::cout);
      if (status.ok() && command != "delete") std::cout << "\n";
      return status.ok() ? 0 : Fail(status);
    }
  }
  std::cerr << kUsage << "\n";
  return 2;
}
