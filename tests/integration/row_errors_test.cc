// One bad row must not take down its shard or the stream: a failed request
// fails its own row, a prompt over the limit fails its own row, and results
// never go out in messages a client cannot take.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "sdg/v1/generation.grpc.pb.h"
#include "tests/integration/service_fixture.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::Events;
using testing::SimThread;

std::vector<int64_t> RowIndexes(const Events& events) {
  std::vector<int64_t> indexes;
  for (const v1::ResultRow& row : events.Rows()) {
    indexes.push_back(row.row_index());
  }
  return indexes;
}

class RowErrorsTest : public testing::ServiceFixture {
 protected:
  // llmsim answers its requests by `script` (then ok), one request at a
  // time in the order sdgd posts them: which row gets which answer is known.
  void StartWithScript(const std::string& script, BatchingMode batching,
                       ServerOptions options = {}) {
    llmsim::SimServer::Options sim_options;
    sim_options.fault_script = script;
    sim_ = std::make_unique<SimThread>(sim_options);
    backend_defaults_.batching = batching;
    backend_defaults_.in_flight_mode = InFlightMode::kFixed;
    backend_defaults_.max_in_flight = 1;
    backend_defaults_.retry.max_attempts = 1;
    StartServer({{"sim", sim_->url()}}, options);
  }
  // 9 rows in 3 shards of 3, one shard at a time.
  static v1::GenerateJobRequest NineRows() {
    v1::GenerateJobRequest request = Request(9);
    request.set_num_workers(1);
    return request;
  }

  void TearDown() override {
    ServiceFixture::TearDown();
    sim_.reset();
  }

  std::unique_ptr<SimThread> sim_;
};

TEST_F(RowErrorsTest, AFailedRequestFailsOnlyItsRow) {
  StartWithScript("ok,400", BatchingMode::kOff);
  Events events = Run(NineRows());
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  // Row 1's request got the 400; rows 0 and 2 of its shard are delivered.
  EXPECT_THAT(RowIndexes(events), ElementsAre(0, 2, 3, 4, 5, 6, 7, 8));
  std::vector<v1::ShardError> errors = events.Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].shard_index(), 0);
  EXPECT_EQ(errors[0].first_row(), 1);
  EXPECT_EQ(errors[0].row_count(), 1);
  EXPECT_EQ(errors[0].code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(errors[0].attempts(), 1);
  const v1::JobFinished finished = events.Finished();
  EXPECT_EQ(finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(finished.rows_succeeded(), 8);
  EXPECT_EQ(finished.rows_failed(), 1);
  EXPECT_EQ(finished.shards_succeeded(), 2);
  EXPECT_EQ(finished.shards_failed(), 1);
  EXPECT_EQ(
      finished.reason(),
      "1 of 9 rows failed (in 1 of 3 shards); see the shard_error events");
  EXPECT_EQ(Metric("sdg_rows_total{outcome=\"succeeded\"}"), 8);
  EXPECT_EQ(Metric("sdg_rows_total{outcome=\"failed\"}"), 1);
  EXPECT_EQ(Metric("sdg_shards_total{outcome=\"failed\"}"), 1);
  // GetJob counts the same, from the stored events.
  absl::StatusOr<v1::Job> job = GetJob(events.all.front().job_id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->rows_succeeded(), 8);
  EXPECT_EQ(job->rows_failed(), 1);
}

TEST_F(RowErrorsTest, NeighbouringRowsWithOneErrorShareAnEvent) {
  StartWithScript("ok,503,503,ok", BatchingMode::kOff);
  Events events = Run(NineRows());
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_THAT(RowIndexes(events), ElementsAre(0, 3, 4, 5, 6, 7, 8));
  std::vector<v1::ShardError> errors = events.Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].first_row(), 1);
  EXPECT_EQ(errors[0].row_count(), 2);
  EXPECT_EQ(errors[0].code(), static_cast<int>(absl::StatusCode::kUnavailable));
}

TEST_F(RowErrorsTest, ABatchedRequestFailsItsShardAsAUnit) {
  // One request per shard: the backend answered for its three rows at once.
  StartWithScript("ok,400", BatchingMode::kOn);
  Events events = Run(NineRows());
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_THAT(RowIndexes(events), ElementsAre(0, 1, 2, 6, 7, 8));
  std::vector<v1::ShardError> errors = events.Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].shard_index(), 1);
  EXPECT_EQ(errors[0].first_row(), 3);
  EXPECT_EQ(errors[0].row_count(), 3);
  EXPECT_EQ(events.Finished().rows_failed(), 3);
}

TEST_F(RowErrorsTest, APromptOverTheLimitFailsItsRowAndSendsNothing) {
  ServerOptions options;
  options.service.limits.max_prompt_bytes = 100;
  StartWithScript("", BatchingMode::kOff, options);
  v1::GenerateJobRequest request = NineRows();
  (*request.mutable_rows(4)->mutable_fields())["question"].set_string_value(
      std::string(200, 'x'));
  Events events = Run(request);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_THAT(RowIndexes(events), ElementsAre(0, 1, 2, 3, 5, 6, 7, 8));
  std::vector<v1::ShardError> errors = events.Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].first_row(), 4);
  EXPECT_EQ(errors[0].row_count(), 1);
  EXPECT_EQ(errors[0].attempts(), 0);
  EXPECT_EQ(errors[0].message(),
            "the prompt is longer than 100 bytes (the server's "
            "--max_prompt_bytes)");
  EXPECT_EQ(sim_->Stats()["requests"].get<int64_t>(), 8);
}

TEST_F(RowErrorsTest, ManyPlaceholdersCannotAmplifyARequest) {
  // 2,000 placeholders over a 1 KB column would be 2 MB per prompt: each
  // row fails at the limit, with nothing rendered past it.
  ServerOptions options;
  options.service.limits.max_prompt_bytes = 64 << 10;
  StartWithScript("", BatchingMode::kOff, options);
  v1::GenerateJobRequest request = NineRows();
  std::string template_text;
  for (int i = 0; i < 2000; ++i) template_text += "{{question}}";
  request.mutable_block()->set_prompt_template(template_text);
  for (auto& row : *request.mutable_rows()) {
    (*row.mutable_fields())["question"].set_string_value(
        std::string(1000, 'q'));
  }
  Events events = Run(request);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_TRUE(events.Rows().empty());
  EXPECT_EQ(events.Finished().rows_failed(), 9);
  EXPECT_EQ(sim_->Stats()["requests"].get<int64_t>(), 0);
}

TEST_F(RowErrorsTest, AShardsPromptsHaveABudget) {
  ServerOptions options;
  options.service.limits.max_shard_prompt_bytes = 250;
  StartWithScript("", BatchingMode::kOff, options);
  v1::GenerateJobRequest request = NineRows();
  // Shard 1 is rows 3-5: 100 + 100 fit, the third would pass 250.
  for (int row : {3, 4, 5}) {
    (*request.mutable_rows(row)->mutable_fields())["question"].set_string_value(
        std::string(100, 'x'));
  }
  Events events = Run(request);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_THAT(RowIndexes(events), ElementsAre(0, 1, 2, 3, 4, 6, 7, 8));
  std::vector<v1::ShardError> errors = events.Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].first_row(), 5);
  EXPECT_THAT(errors[0].message(), HasSubstr("--max_shard_prompt_bytes"));
}

class ResultSizeTest : public testing::ServiceFixture {
 protected:
  void SetUp() override { StartServer({{"sim", sim_.url()}}); }
  // 4 rows of 100 KB, 20 samples each: 8 MB of results with the input.
  static v1::GenerateJobRequest BigRows() {
    v1::GenerateJobRequest request = Request(4);
    for (auto& row : *request.mutable_rows()) {
      (*row.mutable_fields())["context"].set_string_value(
          std::string(100 << 10, 'c'));
    }
    request.mutable_block()->set_n(20);
    request.set_batch_size(4);
    return request;
  }
  SimThread sim_;
};

TEST_F(ResultSizeTest, ResultsAreSplitIntoEventsOfAtMostOneMebibyte) {
  Events events = Run(BigRows());
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  int result_events = 0;
  for (const v1::JobEvent& event : events.all) {
    if (!event.has_shard_result()) continue;
    ++result_events;
    EXPECT_LE(event.ByteSizeLong(), (1u << 20) + 1024);
  }
  // 80 results of ~100 KB: at least 8 events.
  EXPECT_GE(result_events, 8);
  std::vector<v1::ResultRow> rows = events.Rows();
  ASSERT_EQ(rows.size(), 80u);
  EXPECT_EQ(rows[79].columns().fields().at("context").string_value().size(),
            100u << 10);
  EXPECT_EQ(events.Finished().rows_succeeded(), 4);
}

TEST_F(ResultSizeTest, OutputOnlyResultsCarryJustTheOutputColumn) {
  v1::GenerateJobRequest request = BigRows();
  request.set_result_columns(v1::RESULT_COLUMNS_OUTPUT_ONLY);
  Events events = Run(request);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  std::vector<v1::ResultRow> rows = events.Rows();
  ASSERT_EQ(rows.size(), 80u);
  for (const v1::ResultRow& row : rows) {
    ASSERT_EQ(row.columns().fields().size(), 1u);
    EXPECT_FALSE(row.columns().fields().at("output").string_value().empty());
  }
  size_t bytes = 0;
  for (const v1::JobEvent& event : events.all) bytes += event.ByteSizeLong();
  EXPECT_LT(bytes, 100u << 10) << "a fraction of the 8 MB with the input";
}

TEST_F(ResultSizeTest, UnknownResultColumnsIsInvalidArgument) {
  v1::GenerateJobRequest request = Request(1);
  request.set_result_columns(static_cast<v1::ResultColumns>(7));
  Events events = Run(request);
  EXPECT_EQ(events.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(events.status.error_message(), "result_columns: unknown value 7");
}

}  // namespace
}  // namespace sdg
