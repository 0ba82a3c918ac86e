#include "server/service/file_upload.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "server/jobs/batch_line.h"
#include "server/service/storage_quota.h"

namespace sdg {

FileUpload::FileUpload(DatasetStore& store, std::string file_id,
                       std::string tenant, std::string filename,
                       std::string purpose, Limits limits)
    : store_(store),
      file_id_(std::move(file_id)),
      tenant_(std::move(tenant)),
      filename_(std::move(filename)),
      purpose_(std::move(purpose)),
      limits_(std::move(limits)) {}

FileUpload::~FileUpload() {
  if (builder_ == nullptr || saved_) return;
  builder_.reset();
  store_.DiscardUpload(file_id_);
}

absl::Status FileUpload::Take(absl::string_view data) {
  if (builder_ == nullptr) {
    SDG_ASSIGN_OR_RETURN(builder_, store_.NewUpload(file_id_));
  }
  bytes_ += static_cast<int64_t>(data.size());
  const DatasetUpload::Limits& upload = limits_.upload;
  if (upload.max_upload_bytes > 0 && bytes_ > upload.max_upload_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("file: larger than ", upload.max_upload_bytes,
                     " bytes (the server's ", limits_.bytes_flag, ")"));
  }
  if (upload.quota_bytes > 0 &&
      upload.usage.total() + bytes_ > upload.quota_bytes) {
    StorageUsage usage = upload.usage;
    usage.upload_bytes += bytes_;
    return StorageQuotaError(tenant_, usage, upload.quota_bytes);
  }
  sha256_.Update(data);
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    if (newline == absl::string_view::npos) {
      if (partial_.size() + data.size() > JsonLinesDecoder::kMaxLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("file: line ", lines_ + 1, " is longer than ",
                         JsonLinesDecoder::kMaxLineBytes, " bytes"));
      }
      partial_.append(data.data(), data.size());
      return absl::OkStatus();
    }
    if (partial_.empty()) {
      SDG_RETURN_IF_ERROR(AddLine(data.substr(0, newline)));
    } else {
      partial_.append(data.data(), newline);
      SDG_RETURN_IF_ERROR(AddLine(partial_));
      partial_.clear();
    }
    data.remove_prefix(newline + 1);
  }
  return absl::OkStatus();
}

absl::Status FileUpload::AddLine(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  ++lines_;
  if (limits_.max_lines > 0 && lines_ > limits_.max_lines) {
    return absl::InvalidArgumentError(
        absl::StrCat("file: more than ", limits_.max_lines,
                     " lines (the server's ", limits_.lines_flag, ")"));
  }
  SetLineRow(line, row_);
  return builder_->Add(row_);
}

absl::StatusOr<StoredDataset> FileUpload::Complete() {
  if (builder_ == nullptr) SDG_RETURN_IF_ERROR(Take(""));
  if (!partial_.empty()) {
    SDG_RETURN_IF_ERROR(AddLine(partial_));
    partial_.clear();
  }
  if (lines_ == 0) {
    return absl::InvalidArgumentError("file: the file is empty");
  }
  SDG_RETURN_IF_ERROR(builder_->Finish().status());
  StoredDataset stored;
  stored.dataset.set_dataset_id(file_id_);
  stored.dataset.set_rows(lines_);
  stored.dataset.set_bytes(bytes_);
  stored.dataset.set_sha256(sha256_.HexDigest());
  stored.dataset.set_filename(filename_);
  stored.dataset.set_purpose(purpose_);
  stored.tenant = tenant_;
  stored.info = builder_->info();
  stored.create_time = absl::Now();
  SDG_RETURN_IF_ERROR(store_.SaveUpload(stored));
  saved_ = true;
  Log(LogLevel::kInfo, "file uploaded",
      {{"file_id", file_id_},
       {"tenant", tenant_},
       {"purpose", purpose_},
       {"lines", lines_},
       {"bytes", bytes_}});
  return stored;
}

}  // namespace sdg
