#include "server/pipeline/pipeline_rows.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "google/protobuf/util/json_util.h"
#include "server/jobs/job_spec.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

google::protobuf::Struct Row(const std::string& json) {
  google::protobuf::Struct row;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &row).ok());
  return row;
}

// The steps of a pipeline given as the request's JSON.
PipelineSpec Pipeline(const std::string& steps_json) {
  v1::GenerateJobRequest request;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"pipeline": {"steps": )" + steps_json + "}}", &request)
                  .ok());
  request.set_num_instructions_to_generate(2);
  absl::StatusOr<JobSpec> spec = ValidateRequest(request, {"sim"}, {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec->pipeline;
}

std::string Column(const PipelineRow& row, const std::string& name) {
  return row.columns().fields().at(name).string_value();
}

std::vector<std::string> Sorted(std::vector<PipelineRow> rows,
                                const std::string& column) {
  std::stable_sort(rows.begin(), rows.end(), OrderKeyLess);
  std::vector<std::string> values;
  for (const PipelineRow& row : rows) values.push_back(Column(row, column));
  return values;
}

// pandas' melt: every row's first var column, then every row's second, even
// though each row makes its own rows one after another.
TEST(PipelineRowsTest, FlattenIsVariableMajor) {
  PipelineSpec pipeline = Pipeline(R"([{"name": "flat", "flatten_columns": {
      "var_columns": ["a", "b"], "value_name": "v", "var_name": "which"}}])");
  std::vector<PipelineRow> seeds = SeedRows(
      10,
      {Row(R"({"a": "a10", "b": "b10"})"), Row(R"({"a": "a11", "b": "b11"})")});
  StepOutput out = ApplyColumnStep(pipeline.steps[0], std::move(seeds));
  EXPECT_TRUE(out.failed.empty());
  EXPECT_THAT(Sorted(out.rows, "v"), ElementsAre("a10", "a11", "b10", "b11"));
  EXPECT_EQ(out.rows[1].row_index(), 10);
  EXPECT_EQ(Column(out.rows[1], "which"), "b");
  EXPECT_THAT(out.rows[1].order_key(), ElementsAre(1, 10));
  ASSERT_EQ(out.rows[1].lineage_size(), 1);
  EXPECT_EQ(out.rows[1].lineage(0).step(), "flat");
  EXPECT_EQ(out.rows[1].lineage(0).column_index(), 1);
}

// LLMBlock: a row expands in place into its samples, each into its matches;
// a generation with no match yields no row.
TEST(PipelineRowsTest, AnLlmStepExpandsEachRowIntoSamplesThenMatches) {
  PipelineSpec pipeline = Pipeline(R"([{"name": "gen", "llm": {
      "block": {"model": "m", "prompt_template": "{{x}}"},
      "scaled_n": true, "output_columns": ["q"],
      "tags": {"start_tags": ["<q>"], "end_tags": ["</q>"]}}}])");
  std::vector<PipelineRow> seeds =
      SeedRows(0, {Row(R"({"x": "0"})"), Row(R"({"x": "1"})")});
  std::vector<absl::StatusOr<std::vector<std::string>>> texts;
  texts.push_back(std::vector<std::string>{"<q>0a</q> <q>0b</q>", "<q>0c</q>"});
  texts.push_back(std::vector<std::string>{"nothing", "  <q>1a</q>  "});
  StepOutput out =
      ExpandGenerations(pipeline.steps[0], std::move(seeds), texts, {1, 1});
  EXPECT_THAT(Sorted(out.rows, "q"), ElementsAre("0a", "0b", "0c", "1a"));
  EXPECT_THAT(out.rows[2].order_key(), ElementsAre(0, 1, 0));
  EXPECT_THAT(out.rows[3].order_key(), ElementsAre(1, 1, 0));
  EXPECT_EQ(Column(out.rows[3], "x"), "1");
  EXPECT_EQ(out.rows[3].lineage(0).sample_index(), 1);
}

TEST(PipelineRowsTest, AFailedGenerationFailsItsRowAtTheStep) {
  PipelineSpec pipeline = Pipeline(R"([{"name": "gen", "llm": {
      "block": {"model": "m", "prompt_template": "{{x}}"},
      "output_columns": ["q"]}}])");
  std::vector<PipelineRow> seeds = SeedRows(5, {Row(R"({"x": "0"})")});
  std::vector<absl::StatusOr<std::vector<std::string>>> texts;
  texts.push_back(absl::UnavailableError("backend returned HTTP 503"));
  StepOutput out =
      ExpandGenerations(pipeline.steps[0], std::move(seeds), texts, {3});
  EXPECT_TRUE(out.rows.empty());
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].row_index, 5);
  EXPECT_EQ(out.failed[0].step, 0);
  EXPECT_EQ(out.failed[0].attempts, 3);
  EXPECT_THAT(out.failed[0].order_key, ElementsAre(5));
}

// The first row in output order survives, whichever shard delivered it.
TEST(PipelineRowsTest, DropDuplicatesKeepsTheFirstInOutputOrder) {
  PipelineSpec pipeline = Pipeline(R"([{"name": "flat",
      "flatten_columns": {"var_columns": ["a", "b"], "value_name": "v",
                          "var_name": "which"},
      "drop_duplicates": ["v"]}, {"name": "next", "rename_columns": {
      "columns_map": [{"from": "v", "to": "w"}]}}])");
  ASSERT_EQ(pipeline.stages.size(), 2u);
  // Seed row 1's first column repeats seed row 0's second: row 1's comes
  // first in melt's order. Arriving first does not matter.
  std::vector<PipelineRow> rows;
  for (int64_t seed : {1, 0}) {
    std::vector<PipelineRow> one =
        seed == 1 ? SeedRows(1, {Row(R"({"a": "same", "b": "b1"})")})
                  : SeedRows(0, {Row(R"({"a": "a0", "b": "same"})")});
    StepOutput out = ApplyColumnStep(pipeline.steps[0], std::move(one));
    for (PipelineRow& row : out.rows) rows.push_back(std::move(row));
  }
  std::vector<PipelineRow> kept = DropDuplicates(pipeline.steps[0], rows);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_THAT(Sorted(kept, "v"), ElementsAre("a0", "same", "b1"));
  EXPECT_EQ(kept[1].row_index(), 1);
  EXPECT_EQ(Column(kept[1], "which"), "a");
}

TEST(PipelineRowsTest, ARowWithoutTheDuplicateKeyFailsAtTheBarrier) {
  PipelineSpec pipeline = Pipeline(R"([{"name": "dup",
      "duplicate_columns": {"columns_map": [{"from": "a", "to": "b"}]},
      "drop_duplicates": ["q"]}])");
  std::vector<PipelineRow> rows =
      SeedRows(0, {Row(R"({"a": "1", "q": "x"})"), Row(R"({"a": "2"})")});
  std::vector<PipelineRowFailure> failed =
      TakeRowsWithoutKey(pipeline.steps[0], rows);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].row_index, 1);
  EXPECT_THAT(failed[0].status.message(), HasSubstr("drop_duplicates"));
  EXPECT_THAT(failed[0].status.message(), HasSubstr("\"q\""));
}

TEST(PipelineRowsTest, NumSamplesAddsItsColumnWhereMissing) {
  PipelineSpec pipeline = Pipeline(R"([{"name": "gen", "llm": {
      "block": {"model": "m", "prompt_template": "{{x}}"},
      "output_columns": ["q"], "num_samples": 30}}])");
  std::vector<PipelineRow> rows = SeedRows(
      0, {Row(R"({"x": "0"})"), Row(R"({"x": "1", "num_samples": 2})")});
  PrepareLlmRows(*pipeline.steps[0].llm(), rows);
  EXPECT_EQ(rows[0].columns().fields().at("num_samples").number_value(), 30);
  EXPECT_EQ(rows[1].columns().fields().at("num_samples").number_value(), 2);
}

}  // namespace
}  // namespace sdg
