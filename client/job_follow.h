// Following a job's events across restarts of sdgd and dropped connections:
// WatchJob from the last sequence applied, again and again, so that every
// event is applied exactly once and in order.
#ifndef SDG_CLIENT_JOB_FOLLOW_H_
#define SDG_CLIENT_JOB_FOLLOW_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sdg/v1/generation.grpc.pb.h"

namespace sdg {

// The call in progress, so that another thread (a signal) can stop it.
class CallStopper {
 public:
  void Set(grpc::ClientContext* context);
  // Cancels the call in progress and every later one.
  void Stop();
  bool stopped() const;

 private:
  mutable absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

struct FollowOptions {
  // Give up once sdgd has been unreachable this long.
  absl::Duration reconnect_for = absl::Minutes(10);
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
};

struct FollowResult {
  // The last event's sequence: where a later follow would continue.
  uint64_t last_sequence = 0;
  // Set once the job's `finished` event was applied.
  std::optional<v1::JobFinished> finished;
  // Why following ended without `finished` (stopped, or sdgd gone for good).
  grpc::Status status;
  int reconnects = 0;
};

// Calls `on_event` for each event after `after_sequence` until `finished`.
// When the stream breaks (sdgd restarting, a suspended job, a dropped
// connection) it prints one line to `log` and watches again from the last
// sequence applied. An error from `on_event` ends following with it.
absl::StatusOr<FollowResult> FollowJob(
    grpc::Channel& channel, const std::string& job_id, uint64_t after_sequence,
    const FollowOptions& options,
    absl::FunctionRef<absl::Status(const v1::JobEvent&)> on_event,
    std::ostream& log, CallStopper* stopper = nullptr);

// Runs a unary call, again while sdgd is unreachable (UNAVAILABLE), for up to
// `options.reconnect_for`, waiting a doubling backoff in between; the
// context it passes waits for the channel to be ready until then. For calls
// that are safe to repeat (CreateJob with a job_id, GetJob...).
grpc::Status CallWithReconnect(
    const FollowOptions& options,
    absl::FunctionRef<grpc::Status(grpc::ClientContext&)> call);

}  // namespace sdg

#endif  // SDG_CLIENT_JOB_FOLLOW_H_
