#include "server/backend/rate_budget.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sdg {

absl::StatusOr<RateLimits> ParseRateLimits(absl::string_view text) {
  RateLimits limits;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(part, absl::MaxSplits(':', 1));
    int64_t* field = kv.first == "rpm"    ? &limits.requests
                     : kv.first == "tpm"  ? &limits.tokens
                     : kv.first == "itpm" ? &limits.input_tokens
                     : kv.first == "otpm" ? &limits.output_tokens
                                          : nullptr;
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", part,
          "\": expected rpm:N, tpm:N, itpm:N or otpm:N (requests, tokens, "
          "input tokens or output tokens a minute)"));
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(kv.second, &value) || value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", part, "\": the limit must be a positive whole number"));
    }
    if (*field != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", kv.first, "\" is given twice"));
    }
    *field = value;
  }
  return limits;
}

RateBudget::Bucket::Bucket(int64_t per_minute, absl::Time now)
    : per_second_(static_cast<double>(per_minute) / 60),
      capacity_(per_second_),
      level_(capacity_),
      refilled_(now) {}

void RateBudget::Bucket::Refill(absl::Time now) {
  if (now <= refilled_) return;
  level_ = std::min(
      capacity_, level_ + per_second_ * absl::ToDoubleSeconds(now - refilled_));
  refilled_ = now;
}

absl::Time RateBudget::Bucket::ReadyAt(double amount, absl::Time now) {
  if (!limited()) return now;
  Refill(now);
  // More than the bucket holds goes when it is full.
  const double needed = std::min(amount, capacity_);
  if (level_ >= needed) return now;
  return now + absl::Seconds((needed - level_) / per_second_);
}

void RateBudget::Bucket::Add(double amount, absl::Time now) {
  if (!limited()) return;
  Refill(now);
  level_ = std::min(capacity_, level_ + amount);
}

double RateBudget::Bucket::level(absl::Time now) {
  Refill(now);
  return level_;
}

RateBudget::RateBudget(const RateLimits& limits, absl::Time now)
    : requests_(limits.requests, now),
      tokens_(limits.tokens, now),
      input_tokens_(limits.input_tokens, now),
      output_tokens_(limits.output_tokens, now) {}

absl::Time RateBudget::ReadyAt(const TokenCost& cost, absl::Time now) {
  const auto input = static_cast<double>(cost.input);
  const auto output = static_cast<double>(cost.output);
  return std::max(
      {requests_.ReadyAt(1, now), tokens_.ReadyAt(input + output, now),
       input_tokens_.ReadyAt(input, now), output_tokens_.ReadyAt(output, now)});
}

void RateBudget::Take(const TokenCost& cost, absl::Time now) {
  const auto input = static_cast<double>(cost.input);
  const auto output = static_cast<double>(cost.output);
  requests_.Add(-1, now);
  tokens_.Add(-(input + output), now);
  input_tokens_.Add(-input, now);
  output_tokens_.Add(-output, now);
}

void RateBudget::Settle(const TokenCost& reserved, const TokenCost& used,
                        absl::Time now) {
  const auto back_input = static_cast<double>(reserved.input - used.input);
  const auto back_output = static_cast<double>(reserved.output - used.output);
  tokens_.Add(back_input + back_output, now);
  input_tokens_.Add(back_input, now);
  output_tokens_.Add(back_output, now);
}

RateBudget::Available RateBudget::available(absl::Time now) {
  auto of = [now](Bucket& bucket) -> std::optional<double> {
    if (!bucket.limited()) return std::nullopt;
    return bucket.level(now);
  };
  return {of(requests_), of(tokens_), of(input_tokens_), of(output_tokens_)};
}

}  // namespace sdg
