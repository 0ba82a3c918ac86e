#include "server/service/file_upload.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "server/jobs/batch_line.h"
#include "server/service/storage_quota.h"

namespace sdg {

absl::StatusOr<StoredDataset> SaveBatchFile(DatasetStore& store,
                                            DatasetBuilder& builder,
                                            StoredDataset record,
                                            FileCount& count) {
  SDG_RETURN_IF_ERROR(builder.Finish().status());
  record.dataset.set_rows(count.lines);
  record.dataset.set_bytes(count.bytes);
  record.dataset.set_sha256(count.sha256.HexDigest());
  record.info = builder.info();
  record.create_time = absl::Now();
  SDG_RETURN_IF_ERROR(store.SaveUpload(record));
  return record;
}

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
  count_.bytes += static_cast<int64_t>(data.size());
  const DatasetUpload::Limits& upload = limits_.upload;
  if (upload.max_upload_bytes > 0 && count_.bytes > upload.max_upload_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("file: larger than ", upload.max_upload_bytes,
                     " bytes (the server's ", limits_.bytes_flag, ")"));
  }
  if (upload.quota_bytes > 0 &&
      upload.usage.total() + count_.bytes > upload.quota_bytes) {
    StorageUsage usage = upload.usage;
    usage.upload_bytes += count_.bytes;
    return StorageQuotaError(tenant_, usage, upload.quota_bytes);
  }
  count_.sha256.Update(data);
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    if (newline == absl::string_view::npos) {
      if (partial_.size() + data.size() > JsonLinesDecoder::kMaxLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("file: line ", count_.lines + 1, " is longer than ",
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
  ++count_.lines;
  if (limits_.max_lines > 0 && count_.lines > limits_.max_lines) {
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
  if (count_.lines == 0) {
    return absl::InvalidArgumentError("file: the file is empty");
  }
  StoredDataset record;
  record.dataset.set_dataset_id(file_id_);
  record.dataset.set_filename(filename_);
  record.dataset.set_purpose(purpose_);
  record.tenant = tenant_;
  SDG_ASSIGN_OR_RETURN(
      StoredDataset stored,
      SaveBatchFile(store_, *builder_, std::move(record), count_));
  saved_ = true;
  Log(LogLevel::kInfo, "file uploaded",
      {{"file_id", file_id_},
       {"tenant", tenant_},
       {"purpose", purpose_},
       {"lines", count_.lines},
       {"bytes", count_.bytes}});
  return stored;
}

}  // namespace sdg
