// Events for tests of the event log: a shard's result, told apart by its
// shard index.
#ifndef SDG_TESTS_TESTING_LOG_EVENTS_H_
#define SDG_TESTS_TESTING_LOG_EVENTS_H_

#include <cstdint>
#include <string>

#include "sdg/v1/generation.pb.h"

namespace sdg::testing {

// Shard `shard`'s result: one row, whose index is the shard's.
inline v1::JobEvent ResultOfShard(int64_t shard) {
  v1::JobEvent event;
  event.set_job_id("j");
  event.mutable_shard_result()->set_shard_index(shard);
  v1::ResultRow* row = event.mutable_shard_result()->add_rows();
  row->set_row_index(shard);
  (*row->mutable_columns()->mutable_fields())["output"].set_string_value(
      "text of shard " + std::to_string(shard));
  return event;
}

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_LOG_EVENTS_H_
