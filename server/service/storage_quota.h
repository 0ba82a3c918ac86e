// The words of a refusal for storage: a tenant at its quota
// (--tenant_storage_quota_mib), an upload past --max_upload_mib.
#ifndef SDG_SERVER_SERVICE_STORAGE_QUOTA_H_
#define SDG_SERVER_SERVICE_STORAGE_QUOTA_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/store/job_store.h"

namespace sdg {

// "12.3 MiB"
std::string FormatMiB(int64_t bytes);

// RESOURCE_EXHAUSTED naming the tenant, its quota and what it holds, and
// what to do.
absl::Status StorageQuotaError(const std::string& tenant,
                               const StorageUsage& usage, int64_t quota_bytes);

// RESOURCE_EXHAUSTED naming --max_upload_mib.
absl::Status UploadTooLargeError(int64_t max_upload_bytes);

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_STORAGE_QUOTA_H_
