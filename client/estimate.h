// `sdgctl estimate` (and `generate --dry_run`): what a job would take before
// it runs: its rows, requests and tokens as sdgd counts them (EstimateJob),
// with a cost range at the user's prices.
#ifndef SDG_CLIENT_ESTIMATE_H_
#define SDG_CLIENT_ESTIMATE_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/generate.h"
#include "sdg/v1/generation.grpc.pb.h"

namespace sdg {

// Dollars per million tokens, prompt (input) and completion (output).
struct TokenPrices {
  double prompt = 0;
  double completion = 0;
};

// "IN/OUT", e.g. "0.15/0.60"; INVALID_ARGUMENT naming --price otherwise.
absl::StatusOr<TokenPrices> ParsePrices(absl::string_view text);

// Uploads the input, as generate does (the upload is kept for the
// retention, like any), and asks sdgd for the estimate of the job
// `options` describe.
absl::StatusOr<v1::JobEstimate> EstimateJob(grpc::Channel& channel,
                                            const GenerateOptions& options);

// The estimate for people: a line for the job, one per step, and with
// `prices` the cost from no completion tokens to all of them.
std::string FormatEstimate(const v1::JobEstimate& estimate,
                           const std::optional<TokenPrices>& prices);

}  // namespace sdg

#endif  // SDG_CLIENT_ESTIMATE_H_
