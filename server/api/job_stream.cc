#include "server/api/job_stream.h"

namespace sdg {

StreamSink::Action StreamSink::NextActionLocked() {
  Action action;
  action.reactor = reactor_;
  if (reactor_ == nullptr || write_in_flight_ || finish_called_) return action;
  if (client_gone_) {
    queue_.clear();
    finish_called_ = true;
    action.finish = grpc::Status(grpc::StatusCode::CANCELLED,
                                 "the client cancelled the call");
    return action;
  }
  if (!queue_.empty()) {
    in_flight_ = std::move(queue_.front());
    queue_.pop_front();
    write_in_flight_ = true;
    action.write = &in_flight_;
    return action;
  }
  if (closed_) {
    finish_called_ = true;
    action.finish = grpc::Status::OK;
  }
  return action;
}

void StreamSink::Run(Action action) {
  if (action.write != nullptr) {
    action.reactor->StartWrite(action.write);
  } else if (action.finish.has_value()) {
    action.reactor->Finish(*action.finish);
  }
}

void StreamSink::Attach(JobStreamReactor* reactor) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
    action = NextActionLocked();
  }
  Run(action);
}

void StreamSink::Emit(v1::JobEvent event) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (finish_called_ || client_gone_) return;
    queue_.push_back(std::move(event));
    action = NextActionLocked();
  }
  Run(action);
}

void StreamSink::Close() {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    action = NextActionLocked();
  }
  Run(action);
}

bool StreamSink::HasRoom() const {
  absl::MutexLock lock(&mu_);
  // A departed client needs no backpressure: its events are dropped.
  return client_gone_ || queue_.size() < kMaxQueuedEvents;
}

void StreamSink::SetOnRoom(std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  on_room_ = std::move(callback);
}

void StreamSink::OnWriteDone(bool ok) {
  Action action;
  std::function<void()> on_room;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) client_gone_ = true;
    bool was_full = queue_.size() >= kMaxQueuedEvents;
    action = NextActionLocked();
    if (was_full && queue_.size() < kMaxQueuedEvents) on_room = on_room_;
  }
  Run(action);
  if (on_room) on_room();
}

void StreamSink::OnCancel() {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    action = NextActionLocked();
  }
  Run(action);
}

JobStreamReactor::JobStreamReactor(std::shared_ptr<StreamSink> sink,
                                   absl::AnyInvocable<void()> on_client_cancel)
    : sink_(std::move(sink)), on_client_cancel_(std::move(on_client_cancel)) {}

JobStreamReactor* JobStreamReactor::Allocate(
    std::shared_ptr<StreamSink> sink,
    absl::AnyInvocable<void()> on_client_cancel) {
  return new JobStreamReactor(std::move(sink), std::move(on_client_cancel));
}

JobStreamReactor* JobStreamReactor::Reject(const grpc::Status& status) {
  // Its sink is never attached, so nothing but this Finish reaches gRPC.
  auto* reactor = Allocate(std::make_shared<StreamSink>(), nullptr);
  reactor->Finish(status);
  return reactor;
}

JobStreamReactor* JobStreamReactor::Create(
    std::shared_ptr<StreamSink> sink,
    absl::AnyInvocable<void()> on_client_cancel) {
  auto* reactor = Allocate(std::move(sink), std::move(on_client_cancel));
  reactor->sink_->Attach(reactor);
  return reactor;
}

void JobStreamReactor::OnCancel() {
  // OnCancel also follows a normal Finish when the client had already gone;
  // cancelling a finished job does nothing.
  if (on_client_cancel_) std::exchange(on_client_cancel_, nullptr)();
  sink_->OnCancel();
}

}  // namespace sdg
