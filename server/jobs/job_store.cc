#include "server/jobs/job_store.h"

#include "base/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace sdg {

std::string RequestDigest(const v1::GenerateJobRequest& request) {
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
  return Sha256Hex(bytes);
}

}  // namespace sdg
