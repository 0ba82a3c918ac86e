// A job's timeout (JobSpec::timeout): armed when the job starts to run, it
// cancels the job with DEADLINE_EXCEEDED once it passes. Disarmed when
// destroyed or assigned over, which waits for a callback running on the
// timer's thread: never under a lock that Job::Cancel's callbacks take
// (the scheduler's).
#ifndef SDG_SERVER_SCHEDULING_JOB_TIMEOUT_H_
#define SDG_SERVER_SCHEDULING_JOB_TIMEOUT_H_

#include <memory>

#include "base/timer_service.h"
#include "server/jobs/job.h"

namespace sdg {

class JobTimeout {
 public:
  JobTimeout() = default;  // none armed
  // Arms a timer on `timers` if the job has a timeout.
  JobTimeout(TimerService& timers, const std::shared_ptr<Job>& job);
  ~JobTimeout() { Disarm(); }

  JobTimeout(JobTimeout&& other) noexcept;
  JobTimeout& operator=(JobTimeout&& other) noexcept;
  JobTimeout(const JobTimeout&) = delete;
  JobTimeout& operator=(const JobTimeout&) = delete;

 private:
  void Disarm();

  TimerService* timers_ = nullptr;
  TimerService::TimerId id_ = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_JOB_TIMEOUT_H_
