// The server side of one GenerateJob call: a write reactor that sends a job's
// events in order with exactly one write in flight, and finishes the call
// exactly once (after `finished`, or when the client goes away).
#ifndef SDG_SERVER_API_JOB_STREAM_H_
#define SDG_SERVER_API_JOB_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job_sink.h"

namespace sdg {

class JobStreamReactor;

// The job's end of the stream. It is made before the job is admitted and
// holds the job's first events until the call's reactor attaches; it outlives
// the reactor: once the call is finished, further events are dropped.
class StreamSink final : public JobSink {
 public:
  // Events queued beyond this make HasRoom false.
  static constexpr size_t kMaxQueuedEvents = 16;

  StreamSink() = default;

  void Emit(v1::JobEvent event) override;
  void Close() override;
  bool HasRoom() const override;
  void SetOnRoom(std::function<void()> callback) override;

 private:
  friend class JobStreamReactor;

  // What to do with the reactor once mu_ is released. The reactor's methods
  // are never called under mu_: gRPC may run reactions inline.
  struct Action {
    JobStreamReactor* reactor = nullptr;
    const v1::JobEvent* write = nullptr;
    std::optional<grpc::Status> finish;
  };
  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Action action);

  // From the reactor: it starts writing what is queued.
  void Attach(JobStreamReactor* reactor);
  void OnWriteDone(bool ok);
  void OnCancel();

  mutable absl::Mutex mu_;
  // Set once, by Attach; not called after Finish.
  JobStreamReactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::function<void()> on_room_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::JobEvent> queue_ ABSL_GUARDED_BY(mu_);
  v1::JobEvent in_flight_;  // written by the reactor; owned by the write
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;       // job sent its last event
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;  // cancelled or write failed
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

class JobStreamReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  // A call that is rejected: no job runs for it.
  static JobStreamReactor* Reject(const grpc::Status& status);
  // A call that streams the events an admitted job sends to `sink`;
  // `on_client_cancel` runs (once) if the client cancels or drops the call.
  static JobStreamReactor* Create(std::shared_ptr<StreamSink> sink,
                                  absl::AnyInvocable<void()> on_client_cancel);

  void OnWriteDone(bool ok) override { sink_->OnWriteDone(ok); }
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  JobStreamReactor(std::shared_ptr<StreamSink> sink,
                   absl::AnyInvocable<void()> on_client_cancel);
  // Only allocates, and is the one place that does: ThreadSanitizer's
  // suppressions name this frame for races on the reactor object itself,
  // which gRPC hands between its threads inside libgrpc (see
  // tests/tsan/suppressions.txt). Our mutable state lives in the sink.
  static JobStreamReactor* Allocate(
      std::shared_ptr<StreamSink> sink,
      absl::AnyInvocable<void()> on_client_cancel);

  const std::shared_ptr<StreamSink> sink_;
  absl::AnyInvocable<void()> on_client_cancel_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_JOB_STREAM_H_
