// What store tests store: a job's record, and a shard's result event told
// apart by its shard index.
#ifndef SDG_TESTS_TESTING_STORE_TEST_DATA_H_
#define SDG_TESTS_TESTING_STORE_TEST_DATA_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/job_store.h"

namespace sdg::testing {

// A new job's record, as admission stores it, made by `tenant`.
inline JobRecord Record(const std::string& id,
                        const std::string& tenant = "t") {
  JobRecord record;
  record.job_id = id;
  record.tenant = tenant;
  record.request.set_job_id(id);
  record.request.mutable_block()->set_model("m");
  record.request_digest = "digest-" + id;
  record.create_time = absl::FromUnixSeconds(1700000000);
  record.version = 1;  // as AddJob stores it: one UpdateJob lands over it
  return record;
}

// Shard `shard`'s result: one row, whose index is the shard's.
inline LogEvent ResultOfShard(int64_t shard) {
  LogEvent event;
  event.set_job_id("j");
  event.mutable_shard_result()->set_shard_index(shard);
  v1::ResultRow* row = event.mutable_shard_result()->add_rows();
  row->set_row_index(shard);
  (*row->mutable_columns()->mutable_fields())["output"].set_string_value(
      "text of shard " + std::to_string(shard));
  return event;
}

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_STORE_TEST_DATA_H_
