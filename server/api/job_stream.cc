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
         (*next)->event_case == v1::JobEvent::kStageRows) {
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
  }
  return action;
}

void StreamCursor::Pump() {
  while (true) {
    Action action;
    std::shared_ptr<EventLog> log;
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
      if (!reader_->log().NotifyAfter(*action.wait_after, [weak] {
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

void StreamCursor::Attach(JobStreamReactor* reactor) {
  {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
  }
  Pump();
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
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
  }
  Pump();
}

JobStreamReactor::JobStreamReactor(std::shared_ptr<StreamCursor> cursor,
                                   absl::AnyInvocable<void()> on_client_cancel)
    : cursor_(std::move(cursor)),
      on_client_cancel_(std::move(on_client_cancel)) {}

JobStreamReactor* JobStreamReactor::Allocate(
    std::shared_ptr<StreamCursor> cursor,
    absl::AnyInvocable<void()> on_client_cancel) {
  return new JobStreamReactor(std::move(cursor), std::move(on_client_cancel));
}

JobStreamReactor* JobStreamReactor::Reject(const grpc::Status& status) {
  // Its cursor is never attached, so nothing but this Finish reaches gRPC.
  auto* reactor = Allocate(std::make_shared<StreamCursor>(nullptr), nullptr);
  reactor->Finish(status);
  return reactor;
}

JobStreamReactor* JobStreamReactor::Create(
    std::unique_ptr<EventLog::Reader> reader,
    absl::AnyInvocable<void()> on_client_cancel) {
  auto* reactor = Allocate(std::make_shared<StreamCursor>(std::move(reader)),
                           std::move(on_client_cancel));
  reactor->cursor_->Attach(reactor);
  return reactor;
}

void JobStreamReactor::OnCancel() {
  // OnCancel also follows a normal Finish when the client had already gone;
  // cancelling a finished job does nothing.
  if (on_client_cancel_) std::exchange(on_client_cancel_, nullptr)();
  cursor_->OnCancel();
}

}  // namespace sdg
