// A hosted API's limits on requests and tokens a minute
// (--backend_rate_limit NAME=rpm:N,tpm:N,itpm:N,otpm:N), kept as token
// buckets that the backend's dispatch asks before each attempt, beside the
// in-flight cap and the adaptive limit: a request goes when all of them
// allow it. Pure: times are passed in.
//
// Each limit refills continuously at limit/60 a second and holds at most one
// second of it, so requests go out evenly rather than a minute's worth at
// once (hosted APIs enforce per-minute limits over shorter windows, and a
// burst there is a burst of 429s). A request that costs more than a
// second's worth goes when the bucket is full, and the bucket goes negative:
// the next requests wait until it has refilled.
//
// Tokens are reserved before the request (TokenCost: the prompt estimated
// from the body, plus max_tokens × n) and settled with the reply's `usage`:
// what was reserved and not used comes back, what was used beyond it is
// taken. A failed attempt gives its tokens back; it still spent a request.
#ifndef SDG_SERVER_BACKEND_RATE_BUDGET_H_
#define SDG_SERVER_BACKEND_RATE_BUDGET_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/backend/openai_protocol.h"

namespace sdg {

// Per minute; 0: no limit.
struct RateLimits {
  int64_t requests = 0;       // rpm
  int64_t tokens = 0;         // tpm: prompt and completion tokens
  int64_t input_tokens = 0;   // itpm: prompt tokens
  int64_t output_tokens = 0;  // otpm: completion tokens
  bool any() const {
    return requests > 0 || tokens > 0 || input_tokens > 0 || output_tokens > 0;
  }
  bool limits_tokens() const {
    return tokens > 0 || input_tokens > 0 || output_tokens > 0;
  }
};

// "rpm:600,tpm:90000" (any of rpm, tpm, itpm, otpm, each at most once, each
// a positive integer); INVALID_ARGUMENT naming the part and why.
absl::StatusOr<RateLimits> ParseRateLimits(absl::string_view text);

class RateBudget {
 public:
  RateBudget(const RateLimits& limits, absl::Time now);

  // When a request costing `cost` may go: `now` if it may go now.
  absl::Time ReadyAt(const TokenCost& cost, absl::Time now);
  // Spends a request and reserves `cost`.
  void Take(const TokenCost& cost, absl::Time now);
  // A request that reserved `reserved` used `used` (its reply's usage; all
  // zero for an attempt that failed).
  void Settle(const TokenCost& reserved, const TokenCost& used, absl::Time now);

  // What is left now of each limit (a bucket may be negative); nullopt for
  // a limit not set.
  struct Available {
    std::optional<double> requests;
    std::optional<double> tokens;
    std::optional<double> input_tokens;
    std::optional<double> output_tokens;
  };
  Available available(absl::Time now);

 private:
  class Bucket {
   public:
    Bucket(int64_t per_minute, absl::Time now);
    bool limited() const { return per_second_ > 0; }
    // When `amount` may be taken.
    absl::Time ReadyAt(double amount, absl::Time now);
    void Add(double amount, absl::Time now);  // negative: take
    double level(absl::Time now);

   private:
    void Refill(absl::Time now);
    double per_second_ = 0;
    double capacity_ = 0;
    double level_ = 0;
    absl::Time refilled_;
  };

  Bucket requests_;
  Bucket tokens_;
  Bucket input_tokens_;
  Bucket output_tokens_;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_RATE_BUDGET_H_
