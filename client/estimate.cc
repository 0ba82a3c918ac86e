#include "client/estimate.h"

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/grpc_status.h"
#include "client/upload.h"

namespace sdg {
namespace {

std::string CountingName(v1::TokenCounting counting, int64_t tokenized) {
  switch (counting) {
    case v1::TOKEN_COUNTING_TOKENIZER:
      return "counted by the backend's tokenizer";
    case v1::TOKEN_COUNTING_SAMPLED:
      return absl::StrCat(tokenized,
                          " prompts across the dataset counted by the "
                          "backend's tokenizer, the rest at their tokens "
                          "per byte");
    case v1::TOKEN_COUNTING_BYTES:
      return "estimated at 4 bytes a token: the backend serves no tokenizer";
    default:
      return "not known before the run";
  }
}

// "1 row", "2 rows".
std::string Count(int64_t count, absl::string_view noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

// To the second past a minute, to the millisecond below.
std::string RoundedDuration(const google::protobuf::Duration& proto) {
  const absl::Duration duration =
      absl::Seconds(proto.seconds()) + absl::Nanoseconds(proto.nanos());
  return absl::FormatDuration(absl::Trunc(
      duration,
      duration >= absl::Minutes(1) ? absl::Seconds(1) : absl::Milliseconds(1)));
}

// Cents for amounts of a dollar or more; small amounts (a short job's)
// to a millionth of a dollar.
std::string Dollars(double amount) {
  return amount >= 1 ? absl::StrFormat("$%.2f", amount)
                     : absl::StrFormat("$%.6f", amount);
}

std::string StepLine(const v1::StepEstimate& step) {
  std::string line =
      absl::StrCat("  step ", step.step_index(), " \"", step.step_name(),
                   "\" (backend \"", step.backend(), "\", model \"",
                   step.model(), "\", n ", step.samples_per_row(), "): ");
  if (step.prompt_tokens_counting() == v1::TOKEN_COUNTING_UNKNOWN) {
    absl::StrAppend(&line,
                    "not known before the run (its prompts hold text an "
                    "earlier step generates)");
    return line;
  }
  absl::StrAppend(
      &line, step.rows_exact() ? "" : "at most ", Count(step.rows(), "row"),
      ", ", Count(step.requests(), "request"), ", ", step.prompt_tokens(),
      " prompt tokens (",
      CountingName(step.prompt_tokens_counting(), step.tokenized_prompts()),
      "), ");
  if (step.completion_tokens_bounded()) {
    absl::StrAppend(&line, "at most ", step.max_completion_tokens(),
                    " completion tokens");
  } else {
    absl::StrAppend(&line, "completion tokens unbounded (no max_tokens)");
  }
  return line;
}

}  // namespace

absl::StatusOr<TokenPrices> ParsePrices(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  TokenPrices prices;
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &prices.prompt) ||
      !absl::SimpleAtod(parts[1], &prices.completion) || prices.prompt < 0 ||
      prices.completion < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--price must be IN/OUT, dollars per million prompt and completion "
        "tokens (e.g. 0.15/0.60), got \"",
        text, "\""));
  }
  return prices;
}

absl::StatusOr<v1::JobEstimate> EstimateJob(grpc::Channel& channel,
                                            const GenerateOptions& options) {
  auto stub = v1::GenerationService::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  absl::StatusOr<v1::Dataset> dataset =
      UploadDatasetFile(*stub, options.input_path, "");
  if (!dataset.ok()) return dataset.status();
  const v1::GenerateJobRequest request =
      BuildRequest(options, dataset->dataset_id());
  grpc::ClientContext context;
  v1::JobEstimate estimate;
  grpc::Status status = stub->EstimateJob(&context, request, &estimate);
  if (!status.ok()) return FromGrpcStatus(status);
  return estimate;
}

std::string FormatEstimate(const v1::JobEstimate& estimate,
                           const std::optional<TokenPrices>& prices) {
  std::string text =
      absl::StrCat("estimate: ", Count(estimate.rows(), "row"), ", ",
                   Count(estimate.requests(), "request"), ", ",
                   estimate.prompt_tokens(), " prompt tokens, ");
  if (estimate.completion_tokens_bounded()) {
    absl::StrAppend(&text, "at most ", estimate.max_completion_tokens(),
                    " completion tokens");
  } else {
    absl::StrAppend(&text,
                    "completion tokens unbounded (a step sets no "
                    "max_tokens)");
  }
  if (!estimate.complete()) {
    absl::StrAppend(&text,
                    "; for the steps counted (later ones depend on "
                    "generated text)");
  }
  absl::StrAppend(&text, "\n");
  for (const v1::StepEstimate& step : estimate.steps()) {
    absl::StrAppend(&text, StepLine(step), "\n");
  }
  if (estimate.has_min_duration()) {
    absl::StrAppend(&text, "time at the backend's pace over its last ",
                    estimate.measured_requests(),
                    " replies: ", RoundedDuration(estimate.min_duration()),
                    " to ", RoundedDuration(estimate.max_duration()),
                    estimate.complete() ? "" : " for the steps counted", "\n");
  } else if (!estimate.steps().empty()) {
    absl::StrAppend(&text, "time: not known until the backend has answered ",
                    "10 requests (", estimate.measured_requests(),
                    " so far)\n");
  }
  if (prices.has_value()) {
    const double prompt_cost =
        static_cast<double>(estimate.prompt_tokens()) * prices->prompt / 1e6;
    absl::StrAppend(&text, "cost at ", absl::StrFormat("$%g", prices->prompt),
                    "/", absl::StrFormat("$%g", prices->completion),
                    " per million tokens: from ", Dollars(prompt_cost));
    if (estimate.completion_tokens_bounded()) {
      const double most =
          prompt_cost + static_cast<double>(estimate.max_completion_tokens()) *
                            prices->completion / 1e6;
      absl::StrAppend(&text, " to ", Dollars(most));
    } else {
      absl::StrAppend(&text, " up, with no bound on completions");
    }
    absl::StrAppend(&text, estimate.complete() ? "" : " for the steps counted",
                    "\n");
  }
  return text;
}

}  // namespace sdg
