// The server side of a GenerateJob or WatchJob call: a write reactor that
// sends a job's committed events from its log, in sequence order, with
// exactly one write in flight, and finishes the call exactly once: OK after
// `finished`, UNAVAILABLE when the job is suspended, CANCELLED when the
// client goes away. A slow client only reads further behind in the log; the
// job does not wait for it.
#ifndef SDG_SERVER_API_JOB_STREAM_H_
#define SDG_SERVER_API_JOB_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/event_log.h"

namespace sdg {

class JobStreamReactor;

// The stream's state. It outlives its reactor: the log's commit
// notifications may arrive after the call is done, and then do nothing.
class StreamCursor : public std::enable_shared_from_this<StreamCursor> {
 public:
  StreamCursor() = default;

 private:
  friend class JobStreamReactor;

  // What to do with the reactor once mu_ is released. The reactor's methods
  // are never called under mu_: gRPC may run reactions inline.
  struct Action {
    JobStreamReactor* reactor = nullptr;
    const grpc::ByteBuffer* write = nullptr;
    std::optional<grpc::Status> finish;
    // Nothing to send yet: wait for `log` to commit after this sequence.
    std::optional<uint64_t> wait_after;
    EventLog* log = nullptr;
  };
  // Sends the next committed event, finishes, or waits for the log.
  void Pump();
  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Starts streaming what `reader` reads; runs `on_client_cancel` at once if
  // the client went away before.
  void Attach(JobStreamReactor* reactor,
              std::unique_ptr<EventLog::Reader> reader,
              absl::AnyInvocable<void()> on_client_cancel);
  // Whether the caller may Finish a call that was never attached: true
  // once (also after the client went away: Finish is still owed).
  bool TakeFinishOfUnattached();
  void OnWriteDone(bool ok);
  void OnCancel();

  absl::Mutex mu_;
  // Set once, by Attach.
  std::unique_ptr<EventLog::Reader> reader_ ABSL_GUARDED_BY(mu_);
  // Set once, by Attach; not called after Finish.
  JobStreamReactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Runs once, when the client goes away (OnCancel), or at Attach if it
  // went away before.
  absl::AnyInvocable<void()> on_client_cancel_ ABSL_GUARDED_BY(mu_);
  // The event being written, serialized; owned by the write.
  grpc::ByteBuffer in_flight_;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;  // cancelled or write failed
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

// Writes serialized JobEvents: the service's streaming methods are raw
// (see wire.h).
class JobStreamReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // A call that is rejected: nothing is streamed.
  static JobStreamReactor* Reject(const grpc::Status& status);
  // A call that streams what `reader` reads; `on_client_cancel` runs (once)
  // if the client cancels or drops the call.
  static JobStreamReactor* Create(std::unique_ptr<EventLog::Reader> reader,
                                  absl::AnyInvocable<void()> on_client_cancel);
  // A call whose stream is decided later, on another thread (after work
  // that blocks, such as admitting the job): then exactly one of Begin or
  // Fail. Until then the call waits; a client that goes away meanwhile is
  // seen at Begin.
  static JobStreamReactor* CreatePending();
  void Begin(std::unique_ptr<EventLog::Reader> reader,
             absl::AnyInvocable<void()> on_client_cancel);
  void Fail(const grpc::Status& status);

  void OnWriteDone(bool ok) override { cursor_->OnWriteDone(ok); }
  void OnCancel() override { cursor_->OnCancel(); }
  void OnDone() override { delete this; }

 private:
  explicit JobStreamReactor(std::shared_ptr<StreamCursor> cursor);
  // Only allocates, and is the one place that does: ThreadSanitizer's
  // suppressions name this frame for races on the reactor object itself,
  // which gRPC hands between its threads inside libgrpc (see
  // tests/tsan/suppressions.txt). Our mutable state lives in the cursor.
  static JobStreamReactor* Allocate();

  const std::shared_ptr<StreamCursor> cursor_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_JOB_STREAM_H_
