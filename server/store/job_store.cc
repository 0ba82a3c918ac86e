#include "server/store/job_store.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "base/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace sdg {

int64_t ExpireNanos(absl::Time expire_time) {
  return expire_time == absl::InfiniteFuture()
             ? std::numeric_limits<int64_t>::max()
             : absl::ToUnixNanos(expire_time);
}

absl::Time ExpireTimeOf(int64_t expire_ns) {
  return expire_ns == std::numeric_limits<int64_t>::max()
             ? absl::InfiniteFuture()
             : absl::FromUnixNanos(expire_ns);
}

absl::Status NoSuchUpload(const std::string& dataset_id) {
  return absl::NotFoundError(absl::StrCat(
      "dataset_id: no dataset ", Quoted(dataset_id), "; upload it first"));
}

absl::StatusOr<JobRecord> JobRecordStore::LoadJob(const std::string& job_id) {
  absl::StatusOr<std::vector<JobRecord>> records =
      LoadJobsById(absl::MakeConstSpan(&job_id, 1));
  if (!records.ok()) return records.status();
  if (records->empty()) return NoSuchJob(job_id);
  return std::move(records->front());
}

absl::Status NoSuchJob(const std::string& job_id) {
  return absl::NotFoundError(
      absl::StrCat("the store holds no job ", Quoted(job_id)));
}

absl::Status NoJobDataset(const std::string& job_id) {
  return absl::NotFoundError(
      absl::StrCat("the store holds no dataset for job ", Quoted(job_id)));
}

absl::Status JobChanged(const std::string& job_id, int64_t expected,
                        int64_t stored) {
  return absl::AbortedError(absl::StrCat(
      "job ", Quoted(job_id),
      " was saved by another writer since this one read it (version ", expected,
      " expected, ", stored, " stored)"));
}

std::string RequestDigest(const v1::GenerateJobRequest& request,
                          absl::Span<const absl::string_view> serialized_rows) {
  v1::GenerateJobRequest copy = request;
  copy.set_detach(false);
  std::string bytes;
  {
    // Deterministic, so that a row's columns (a map) always hash the same.
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
  }
  if (serialized_rows.empty()) return Sha256Hex(bytes);
  Sha256 digest;
  digest.Update(bytes);
  for (absl::string_view row : serialized_rows) {
    const std::string size = absl::StrCat(row.size(), ":");
    digest.Update(size);
    digest.Update(row);
  }
  return digest.HexDigest();
}

}  // namespace sdg
