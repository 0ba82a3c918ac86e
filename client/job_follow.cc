#include "client/job_follow.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sdg {
namespace {

// Codes after which watching again can succeed: sdgd going away or
// restarting shows as UNAVAILABLE, sometimes as CANCELLED or UNKNOWN when
// the connection drops mid-call.
bool Retryable(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return false;
  }
}

// Waits for the channel to connect, until `deadline`.
bool AwaitConnected(grpc::Channel& channel, absl::Time deadline) {
  return channel.WaitForConnected(absl::ToChronoTime(deadline));
}

}  // namespace

void CallStopper::Set(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  context_ = context;
  if (stopped_ && context_ != nullptr) context_->TryCancel();
}

void CallStopper::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool CallStopper::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

absl::StatusOr<FollowResult> FollowJob(
    grpc::Channel& channel, const std::string& job_id, uint64_t after_sequence,
    const FollowOptions& options,
    absl::FunctionRef<absl::Status(const v1::JobEvent&)> on_event,
    std::ostream& log, CallStopper* stopper) {
  auto stub = v1::GenerationService::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  FollowResult result;
  result.last_sequence = after_sequence;
  absl::Time last_contact = absl::Now();
  absl::Duration backoff = options.initial_backoff;
  bool announced = false;
  while (true) {
    grpc::ClientContext context;
    if (stopper != nullptr) stopper->Set(&context);
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(result.last_sequence);
    auto reader = stub->WatchJob(&context, request);
    v1::JobEvent event;
    absl::Status applied;
    while (reader->Read(&event)) {
      last_contact = absl::Now();
      backoff = options.initial_backoff;
      announced = false;
      if (event.sequence() <= result.last_sequence) continue;  // not expected
      applied = on_event(event);
      if (!applied.ok()) {
        context.TryCancel();
        break;
      }
      result.last_sequence = event.sequence();
      if (event.has_finished()) result.finished = event.finished();
    }
    result.status = reader->Finish();
    if (stopper != nullptr) stopper->Set(nullptr);
    if (!applied.ok()) return applied;
    if (result.finished.has_value()) return result;
    if ((stopper != nullptr && stopper->stopped()) ||
        !Retryable(result.status)) {
      return result;
    }
    // The stream broke before `finished`: watch again from where we are.
    const absl::Time give_up = last_contact + options.reconnect_for;
    if (!announced) {
      log << "sdgctl: lost the stream of job " << job_id << " ("
          << result.status.error_message()
          << "); reconnecting, to continue after event " << result.last_sequence
          << "\n"
          << std::flush;
      announced = true;
    }
    ++result.reconnects;
    absl::SleepFor(std::min(
        backoff, std::max(absl::ZeroDuration(), give_up - absl::Now())));
    backoff = std::min(backoff * 2, options.max_backoff);
    if (absl::Now() >= give_up || !AwaitConnected(channel, give_up)) {
      result.status = grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("sdgd was unreachable for ",
                       absl::FormatDuration(options.reconnect_for),
                       "; the job may still run: sdgctl watch ", job_id));
      return result;
    }
  }
}

grpc::Status CallWithReconnect(
    const FollowOptions& options,
    absl::FunctionRef<grpc::Status(grpc::ClientContext&)> call) {
  const absl::Time give_up = absl::Now() + options.reconnect_for;
  absl::Duration backoff = options.initial_backoff;
  grpc::Status unavailable;  // the last one, to report why we gave up
  while (true) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(absl::ToChronoTime(give_up));
    grpc::Status status = call(context);
    const bool out_of_time = absl::Now() >= give_up;
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        out_of_time && !unavailable.ok()) {
      status = unavailable;
    }
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    if (out_of_time) {
      return grpc::Status(
          status.error_code(),
          absl::StrCat(status.error_message(), " (still so after ",
                       absl::FormatDuration(options.reconnect_for),
                       "; see --reconnect_for)"));
    }
    unavailable = status;
    absl::SleepFor(std::min(backoff, give_up - absl::Now()));
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

}  // namespace sdg
