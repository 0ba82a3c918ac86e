#include "server/service/dataset_upload.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"
#include "server/jobs/job_spec.h"
#include "server/service/storage_quota.h"

namespace sdg {

DatasetUpload::DatasetUpload(DatasetStore& store, std::string tenant,
                             const Limits& limits)
    : store_(store), tenant_(std::move(tenant)), limits_(limits) {}

DatasetUpload::~DatasetUpload() {
  if (builder_ == nullptr || saved_) return;
  builder_.reset();
  store_.DiscardUpload(dataset_id_);
}

absl::Status DatasetUpload::Take(const v1::DatasetChunk& chunk) {
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
  return decoder_.Feed(chunk.data(),
                       [this](const google::protobuf::Struct& row) {
                         return builder_->Add(row);
                       });
}

absl::StatusOr<v1::Dataset> DatasetUpload::Complete() {
  if (builder_ == nullptr) {
    return absl::InvalidArgumentError("the dataset is empty (no data sent)");
  }
  if (absl::Status s =
          decoder_.Finish([this](const google::protobuf::Struct& row) {
            return builder_->Add(row);
          });
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
  saved_ = true;
  Log(LogLevel::kInfo, "dataset uploaded",
      {{"dataset_id", dataset_id_},
       {"tenant", tenant_},
       {"rows", stored.dataset.rows()},
       {"bytes", stored.dataset.bytes()}});
  return stored.dataset;
}

}  // namespace sdg
