#include "server/service/storage_quota.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sdg {

std::string FormatMiB(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

absl::Status StorageQuotaError(const std::string& tenant,
                               const StorageUsage& usage, int64_t quota_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "tenant \"", tenant, "\" holds ", FormatMiB(usage.total()), " of its ",
      FormatMiB(quota_bytes), " storage quota (--tenant_storage_quota_mib): ",
      FormatMiB(usage.upload_bytes), " of uploads, ",
      FormatMiB(usage.dataset_bytes), " of job datasets, ",
      FormatMiB(usage.result_bytes),
      " of job results; delete finished jobs (sdgctl delete) or wait for "
      "--job_retention to remove them"));
}

absl::Status UploadTooLargeError(int64_t max_upload_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the upload is larger than ", FormatMiB(max_upload_bytes),
      ", the server's --max_upload_mib; split the dataset into several "
      "uploads and jobs"));
}

}  // namespace sdg
