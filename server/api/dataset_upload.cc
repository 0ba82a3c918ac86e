#include "server/api/dataset_upload.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"
#include "server/api/status_util.h"
#include "server/api/storage_quota.h"
#include "server/jobs/job_spec.h"

namespace sdg {

DatasetUploadReactor* DatasetUploadReactor::Start(JobStore& store,
                                                  std::string tenant,
                                                  const Limits& limits,
                                                  v1::Dataset* response) {
  auto* reactor =
      new DatasetUploadReactor(store, std::move(tenant), limits, response);
  reactor->StartRead(&reactor->chunk_);
  return reactor;
}

DatasetUploadReactor* DatasetUploadReactor::Refuse(JobStore& store,
                                                   const absl::Status& status) {
  auto* reactor = new DatasetUploadReactor(store, "", Limits{}, nullptr);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

DatasetUploadReactor::DatasetUploadReactor(JobStore& store, std::string tenant,
                                           const Limits& limits,
                                           v1::Dataset* response)
    : store_(store),
      tenant_(std::move(tenant)),
      limits_(limits),
      response_(response) {}

void DatasetUploadReactor::OnReadDone(bool ok) {
  absl::Status status = ok ? Take(chunk_) : Complete();
  if (!status.ok()) {
    End(status);
  } else if (ok) {
    StartRead(&chunk_);
  } else {
    End(absl::OkStatus());
  }
}

absl::Status DatasetUploadReactor::Take(const v1::DatasetChunk& chunk) {
  if (builder_ == nullptr) {
    dataset_id_ = chunk.dataset_id().empty() ? NewJobId() : chunk.dataset_id();
    if (!IsValidId(dataset_id_)) {
      return absl::InvalidArgumentError(
          "dataset_id: use at most 128 letters, digits, '-', '_' or '.', not "
          "starting with '.'");
    }
    if (store_.FindUpload(dataset_id_).ok()) {
      return absl::AlreadyExistsError(
          absl::StrCat("dataset_id: ", Quoted(dataset_id_),
                       " already exists; choose another id or leave it empty"));
    }
    absl::StatusOr<std::unique_ptr<DatasetBuilder>> builder =
        store_.NewUpload(dataset_id_);
    if (!builder.ok()) return builder.status();
    builder_ = *std::move(builder);
  } else if (!chunk.dataset_id().empty() && chunk.dataset_id() != dataset_id_) {
    return absl::InvalidArgumentError(
        "dataset_id: set it on the first chunk only");
  }
  bytes_received_ += static_cast<int64_t>(chunk.data().size());
  if (limits_.max_upload_bytes > 0 &&
      bytes_received_ > limits_.max_upload_bytes) {
    return UploadTooLargeError(limits_.max_upload_bytes);
  }
  if (limits_.quota_bytes > 0 &&
      limits_.usage.total() + bytes_received_ > limits_.quota_bytes) {
    StorageUsage usage = limits_.usage;
    usage.upload_bytes += bytes_received_;
    return StorageQuotaError(tenant_, usage, limits_.quota_bytes);
  }
  sha256_.Update(chunk.data());
  return decoder_.Feed(chunk.data(), [this](google::protobuf::Struct row) {
    return builder_->Add(row);
  });
}

absl::Status DatasetUploadReactor::Complete() {
  if (builder_ == nullptr) {
    return absl::InvalidArgumentError("the dataset is empty (no data sent)");
  }
  if (absl::Status s = decoder_.Finish(
          [this](google::protobuf::Struct row) { return builder_->Add(row); });
      !s.ok()) {
    return s;
  }
  if (builder_->info().rows == 0) {
    return absl::InvalidArgumentError("the dataset is empty (no JSON lines)");
  }
  absl::StatusOr<std::shared_ptr<Dataset>> dataset = builder_->Finish();
  if (!dataset.ok()) return dataset.status();
  StoredDataset stored;
  stored.dataset.set_dataset_id(dataset_id_);
  stored.tenant = tenant_;
  stored.dataset.set_rows(builder_->info().rows);
  stored.dataset.set_bytes(decoder_.bytes());
  stored.dataset.set_sha256(sha256_.HexDigest());
  stored.info = builder_->info();
  stored.create_time = absl::Now();
  if (absl::Status s = store_.SaveUpload(stored); !s.ok()) return s;
  *response_ = stored.dataset;
  Log(LogLevel::kInfo, "dataset uploaded",
      {{"dataset_id", dataset_id_},
       {"tenant", tenant_},
       {"rows", stored.dataset.rows()},
       {"bytes", stored.dataset.bytes()}});
  return absl::OkStatus();
}

void DatasetUploadReactor::End(const absl::Status& status) {
  if (!status.ok()) {
    if (builder_ != nullptr) {
      builder_.reset();
      store_.DiscardUpload(dataset_id_);
    }
    Log(LogLevel::kInfo, "dataset upload refused",
        {{"dataset_id", dataset_id_},
         {"error", std::string(status.message())}});
  }
  Finish(ToGrpcStatus(status));
}

}  // namespace sdg
