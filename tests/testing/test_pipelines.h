// Pipelines for unit tests of the jobs and the scheduler: specs made the
// way the service makes them (ValidateRequest), and the rows a flatten step
// gives.
#ifndef SDG_TESTS_TESTING_TEST_PIPELINES_H_
#define SDG_TESTS_TESTING_TEST_PIPELINES_H_

#include <cstdint>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/jobs/job_spec.h"
#include "server/pipeline/pipeline_rows.h"

namespace sdg::testing {

// A flatten of columns "a" and "b" into "v" whose drop_duplicates on "v"
// ends the first stage; a rename of "v" to "w" is the second.
inline constexpr char kFlattenThenRename[] = R"({"pipeline": {"steps": [
    {"name": "flat", "flatten_columns": {
      "var_columns": ["a", "b"], "value_name": "v", "var_name": "which"},
     "drop_duplicates": ["v"]},
    {"name": "rename", "rename_columns": {"columns_map":
      [{"from": "v", "to": "w"}]}}]}})";

// A rename of "x" to "y" whose drop_duplicates on "y" ends the first stage;
// a rename of "y" to "z" is the second.
inline constexpr char kRenameThenRename[] = R"({"pipeline": {"steps": [
    {"name": "a", "rename_columns": {"columns_map":
      [{"from": "x", "to": "y"}]}, "drop_duplicates": ["y"]},
    {"name": "b", "rename_columns": {"columns_map":
      [{"from": "y", "to": "z"}]}}]}})";

// The spec of a job `id` running `request_json`'s pipeline.
inline JobSpec PipelineJobSpec(const char* request_json, const std::string& id,
                               int batch_size, int num_workers = 1) {
  v1::GenerateJobRequest request;
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(request_json, &request).ok());
  absl::StatusOr<JobSpec> spec = ValidateRequest(request, {"sim"}, {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return JobSpec();
  spec->job_id = id;
  spec->batch_size = batch_size;
  spec->num_workers = num_workers;
  return *std::move(spec);
}

// The row a flatten step makes of seed `seed`'s column `column`: its order
// key puts the column before the seed.
inline PipelineRow Flattened(int64_t seed, int64_t column,
                             const std::string& value) {
  PipelineRow row;
  row.set_row_index(seed);
  row.add_order_key(column);
  row.add_order_key(seed);
  (*row.mutable_columns()->mutable_fields())["v"].set_string_value(value);
  return row;
}

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_TEST_PIPELINES_H_
