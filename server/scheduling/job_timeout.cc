#include "server/scheduling/job_timeout.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sdg {

JobTimeout::JobTimeout(TimerService& timers, const std::shared_ptr<Job>& job) {
  const std::optional<absl::Duration> timeout = job->spec().timeout;
  if (!timeout.has_value()) return;
  timers_ = &timers;
  id_ = timers.RunAfter(*timeout, [weak = std::weak_ptr<Job>(job), timeout] {
    if (std::shared_ptr<Job> job = weak.lock()) {
      job->Cancel(absl::DeadlineExceededError(absl::StrCat(
          "the job's timeout of ", absl::FormatDuration(*timeout), " passed")));
    }
  });
}

JobTimeout::JobTimeout(JobTimeout&& other) noexcept
    : timers_(std::exchange(other.timers_, nullptr)),
      id_(std::exchange(other.id_, 0)) {}

JobTimeout& JobTimeout::operator=(JobTimeout&& other) noexcept {
  if (this != &other) {
    Disarm();
    timers_ = std::exchange(other.timers_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void JobTimeout::Disarm() {
  if (timers_ != nullptr) timers_->CancelTimer(id_);
  timers_ = nullptr;
  id_ = 0;
}

}  // namespace sdg
