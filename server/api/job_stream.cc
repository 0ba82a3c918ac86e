#include "server/api/job_stream.h"

#include <string>

#include "server/api/status_util.h"

namespace sdg {

StreamCursor::Action StreamCursor::NextActionLocked() {
  Action action;
  action.reactor = reactor_;
  if (reactor_ == nullptr || write_in_flight_ || finish_called_) return action;
  if (client_gone_) {
    finish_called_ = true;
    action.finish = grpc::Status(grpc::StatusCode::CANCELLED,
                                 "the client cancelled the call");
    return action;
  }
  absl::StatusOr<std::optional<EventLog::EncodedEvent>> next = reader_->Next();
  // The rows a pipeline carries to a barrier stay in the job's log.
  while (next.ok() && next->has_value() &&
         (*next)->event_case == LogEvent::kStageRows) {
    next = reader_->Next();
  }
  if (!next.ok()) {
    finish_called_ = true;
    action.finish = ToGrpcStatus(next.status());
  } else if (next->has_value()) {
    // Sent as the log holds it, without a parse, a serialization or a copy:
    // the slice owns the bytes.
    auto* bytes = new std::string(std::move((*next)->bytes));
    grpc::Slice event(
        bytes->data(), bytes->size(),
        [](void* owned) { delete static_cast<std::string*>(owned); }, bytes);
    in_flight_ = grpc::ByteBuffer(&event, 1);
    write_in_flight_ = true;
    action.write = &in_flight_;
  } else if (std::optional<absl::Status> end = reader_->End()) {
    finish_called_ = true;
    action.finish = ToGrpcStatus(*end);
  } else {
    action.wait_after = reader_->last_read();
    action.log = &reader_->log();
  }
  return action;
}

void StreamCursor::Pump() {
  while (true) {
    Action action;
    {
      absl::MutexLock lock(&mu_);
      action = NextActionLocked();
    }
    if (action.write != nullptr) {
      action.reactor->StartWrite(action.write);
    } else if (action.finish.has_value()) {
      action.reactor->Finish(*action.finish);
    } else if (action.wait_after.has_value()) {
      std::weak_ptr<StreamCursor> weak = weak_from_this();
      // False: committed (or ended) meanwhile, so look again.
      if (!action.log->NotifyAfter(*action.wait_after, [weak] {
            if (std::shared_ptr<StreamCursor> cursor = weak.lock()) {
              cursor->Pump();
            }
          })) {
        continue;
      }
    }
    return;
  }
}

void StreamCursor::Attach(JobStreamReactor* reactor,
                          std::unique_ptr<EventLog::Reader> reader,
                          absl::AnyInvocable<void()> on_client_cancel) {
  absl::AnyInvocable<void()> cancel_now;
  {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
    reader_ = std::move(reader);
    if (client_gone_) {
      cancel_now = std::move(on_client_cancel);
    } else {
      on_client_cancel_ = std::move(on_client_cancel);
    }
  }
  if (cancel_now) std::move(cancel_now)();
  Pump();
}

bool StreamCursor::TakeFinishOfUnattached() {
  absl::MutexLock lock(&mu_);
  if (finish_called_) return false;
  finish_called_ = true;
  return true;
}

void StreamCursor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) client_gone_ = true;
  }
  Pump();
}

void StreamCursor::OnCancel() {
  // OnCancel also follows a normal Finish when the client had already gone;
  // cancelling a finished job does nothing.
  absl::AnyInvocable<void()> on_client_cancel;
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    on_client_cancel = std::move(on_client_cancel_);
  }
  if (on_client_cancel) std::move(on_client_cancel)();
  Pump();
}

JobStreamReactor::JobStreamReactor(std::shared_ptr<StreamCursor> cursor)
    : cursor_(std::move(cursor)) {}

JobStreamReactor* JobStreamReactor::Allocate() {
  return new JobStreamReactor(std::make_shared<StreamCursor>());
}

JobStreamReactor* JobStreamReactor::Reject(const grpc::Status& status) {
  // Its cursor is never attached, so nothing but this Finish reaches gRPC.
  JobStreamReactor* reactor = Allocate();
  reactor->Fail(status);
  return reactor;
}

JobStreamReactor* JobStreamReactor::Create(
    std::unique_ptr<EventLog::Reader> reader,
    absl::AnyInvocable<void()> on_client_cancel) {
  JobStreamReactor* reactor = Allocate();
  reactor->Begin(std::move(reader), std::move(on_client_cancel));
  return reactor;
}

JobStreamReactor* JobStreamReactor::CreatePending() { return Allocate(); }

void JobStreamReactor::Begin(std::unique_ptr<EventLog::Reader> reader,
                             absl::AnyInvocable<void()> on_client_cancel) {
  cursor_->Attach(this, std::move(reader), std::move(on_client_cancel));
}

void JobStreamReactor::Fail(const grpc::Status& status) {
  if (cursor_->TakeFinishOfUnattached()) Finish(status);
}

}  // namespace sdg
