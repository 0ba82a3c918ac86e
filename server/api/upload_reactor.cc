#include "server/api/upload_reactor.h"

#include "base/logging.h"
#include "server/api/status_util.h"

namespace sdg {

DatasetUploadReactor* DatasetUploadReactor::Start(
    std::unique_ptr<DatasetUpload> upload, v1::Dataset* response) {
  auto* reactor = new DatasetUploadReactor(std::move(upload), response);
  reactor->StartRead(&reactor->chunk_);
  return reactor;
}

DatasetUploadReactor* DatasetUploadReactor::Refuse(const absl::Status& status) {
  auto* reactor = new DatasetUploadReactor(nullptr, nullptr);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

DatasetUploadReactor::DatasetUploadReactor(
    std::unique_ptr<DatasetUpload> upload, v1::Dataset* response)
    : upload_(std::move(upload)), response_(response) {}

void DatasetUploadReactor::OnReadDone(bool ok) {
  absl::Status status = ok ? upload_->Take(chunk_) : Complete();
  if (!status.ok()) {
    End(status);
  } else if (ok) {
    StartRead(&chunk_);
  } else {
    End(absl::OkStatus());
  }
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
  Finish(ToGrpcStatus(status));
}

}  // namespace sdg
