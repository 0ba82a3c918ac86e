#include "server/api/upload_reactor.h"

#include "base/logging.h"
#include "server/api/status_util.h"

namespace sdg {

DatasetUploadReactor* DatasetUploadReactor::Start(
    Executor& blocking, grpc::CallbackServerContext& context, Prepare prepare,
    v1::Dataset* response) {
  auto* reactor = new DatasetUploadReactor(blocking, context, response);
  blocking.Post([reactor, prepare = std::move(prepare)]() mutable {
    absl::StatusOr<std::unique_ptr<DatasetUpload>> upload =
        std::move(prepare)();
    if (!upload.ok()) {
      reactor->handoffs_.fetch_add(1, std::memory_order_release);
      reactor->Finish(ToGrpcStatus(upload.status()));
      return;
    }
    reactor->upload_ = *std::move(upload);
    reactor->ReadNext();
  });
  return reactor;
}

DatasetUploadReactor::DatasetUploadReactor(Executor& blocking,
                                           grpc::CallbackServerContext& context,
                                           v1::Dataset* response)
    : blocking_(blocking), context_(context), response_(response) {}

void DatasetUploadReactor::OnReadDone(bool ok) {
  blocking_.Post([this, ok] { Step(ok); });
}

void DatasetUploadReactor::OnDone() {
  handoffs_.load(std::memory_order_acquire);
  delete this;
}

void DatasetUploadReactor::Step(bool ok) {
  handoffs_.load(std::memory_order_acquire);
  std::unique_ptr<v1::DatasetChunk> chunk = std::move(reading_);
  absl::Status status;
  if (ok) {
    status = upload_->Take(*chunk);
  } else if (context_.IsCancelled()) {
    // gRPC ends reads the same way when the client has sent everything and
    // when it cancelled the call (or the call broke): only the call's state
    // tells them apart.
    status = absl::CancelledError(
        "the upload was cancelled before its last chunk; nothing was stored");
  } else {
    status = Complete();
  }
  chunk.reset();
  if (!status.ok()) {
    End(status);
  } else if (ok) {
    ReadNext();  // last: the next OnReadDone may run at once
  } else {
    End(absl::OkStatus());
  }
}

std::unique_ptr<v1::DatasetChunk> DatasetUploadReactor::NewChunk() {
  return std::make_unique<v1::DatasetChunk>();
}

void DatasetUploadReactor::ReadNext() {
  reading_ = NewChunk();
  v1::DatasetChunk* chunk = reading_.get();
  // The last touch of this reactor's state before the read (see the member).
  handoffs_.fetch_add(1, std::memory_order_release);
  StartRead(chunk);
}

absl::Status DatasetUploadReactor::Complete() {
  absl::StatusOr<v1::Dataset> dataset = upload_->Complete();
  if (!dataset.ok()) return dataset.status();
  *response_ = *std::move(dataset);
  return absl::OkStatus();
}

void DatasetUploadReactor::End(const absl::Status& status) {
  if (!status.ok()) {
    Log(LogLevel::kInfo, "dataset upload refused",
        {{"dataset_id", upload_->dataset_id()},
         {"error", std::string(status.message())}});
  }
  // What was written of a refused upload is discarded with it.
  upload_.reset();
  grpc::Status grpc_status = ToGrpcStatus(status);
  // The last touch of this reactor's state before OnDone (see handoffs_).
  handoffs_.fetch_add(1, std::memory_order_release);
  Finish(grpc_status);  // last: OnDone may delete this at once
}

}  // namespace sdg
