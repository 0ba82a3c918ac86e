#include "server/store/commit_schedule.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace sdg {

CommitSchedule::CommitSchedule(CommitterOptions options, std::string store)
    : options_(std::move(options)),
      store_(std::move(store)),
      backoff_(options_.retry_backoff) {}

absl::Time CommitSchedule::AfterRound(const absl::Status& error) {
  const absl::Time now = absl::Now();
  bool went_down = false;
  bool came_back = false;
  absl::Duration outage;
  absl::Time next_round;
  {
    absl::MutexLock lock(&mu_);
    if (!error.ok()) {
      went_down = failing_since_ == absl::InfinitePast();
      if (went_down) failing_since_ = now;
      next_round = now + backoff_;
      backoff_ = std::min(backoff_ * 2, options_.max_retry_backoff);
    } else {
      came_back = failing_since_ != absl::InfinitePast();
      outage = now - failing_since_;
      failing_since_ = absl::InfinitePast();
      backoff_ = options_.retry_backoff;
      next_round = now + options_.min_round_interval;
    }
  }
  if (went_down) {
    Log(LogLevel::kError,
        absl::StrCat(store_, ": cannot commit; jobs pause and retry"),
        {{"error", std::string(error.message())},
         {"max_outage_s", absl::ToDoubleSeconds(options_.max_outage)}});
    if (options_.on_health) options_.on_health(false, error);
  }
  if (came_back) {
    Log(LogLevel::kInfo, absl::StrCat(store_, ": committing again"),
        {{"outage_s", absl::ToDoubleSeconds(outage)}});
    if (options_.on_health) options_.on_health(true, absl::OkStatus());
  }
  return next_round;
}

bool CommitSchedule::OutageOver() const {
  absl::MutexLock lock(&mu_);
  return failing_since_ != absl::InfinitePast() &&
         absl::Now() - failing_since_ >= options_.max_outage;
}

bool CommitSchedule::up() const {
  absl::MutexLock lock(&mu_);
  return failing_since_ == absl::InfinitePast();
}

}  // namespace sdg
