#include "server/jobs/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "google/protobuf/util/json_util.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

class ValidateRequestTest : public ::testing::Test {
 protected:
  v1::GenerateJobRequest Request() {
    v1::GenerateJobRequest request;
    request.mutable_block()->set_model("m");
    request.mutable_block()->set_prompt_template("Q: {{question}}");
    for (const char* json : {R"({"question":"a"})", R"({"question":"b"})"}) {
      EXPECT_TRUE(
          google::protobuf::util::JsonStringToMessage(json, request.add_rows())
              .ok());
    }
    return request;
  }

  // What admission checks, in its order: the request, its dataset source,
  // then the dataset as stored.
  absl::Status Check(const v1::GenerateJobRequest& request) {
    absl::StatusOr<JobSpec> spec = ValidateRequest(request, backends_, limits_);
    if (!spec.ok()) return spec.status();
    if (absl::Status s = ValidateDatasetSource(request); !s.ok()) return s;
    std::unique_ptr<DatasetBuilder> builder = DatasetBuilder::InMemory();
    for (const auto& row : request.rows()) {
      if (absl::Status s = builder->Add(row); !s.ok()) return s;
    }
    return ValidateDataset(*spec, builder->info(), DatasetSource(request));
  }

  BackendNames backends_ = {"sim"};
  ValidationLimits limits_;
};

TEST_F(ValidateRequestTest, AppliesDefaults) {
  auto spec = ValidateRequest(Request(), backends_, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size, 8);
  EXPECT_EQ(spec->num_workers, limits_.default_num_workers);
  EXPECT_EQ(spec->block.output_column(), "output");
  EXPECT_EQ(spec->block.n(), 1);
  EXPECT_EQ(spec->block.backend(), "sim");
  EXPECT_EQ(spec->job_id.size(), 16u);
  EXPECT_TRUE(Check(Request()).ok());
}

TEST_F(ValidateRequestTest, EmptyTemplateIsRejected) {
  auto request = Request();
  request.mutable_block()->clear_prompt_template();
  absl::Status status = Check(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "block.prompt_template: must not be empty");
}

TEST_F(ValidateRequestTest, MissingColumnNamesColumnAndRow) {
  auto request = Request();
  (*request.mutable_rows(1)->mutable_fields()).erase("question");
  absl::Status status = Check(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "block.prompt_template: column \"question\" is missing from row 1");
}

TEST_F(ValidateRequestTest, UnknownBackendListsTheConfiguredOnes) {
  auto request = Request();
  request.mutable_block()->set_backend("nope");
  absl::Status status = Check(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "block.backend: unknown backend \"nope\"; this server has: sim");
}

TEST_F(ValidateRequestTest, OutOfRangeNumbersNameTheField) {
  auto request = Request();
  request.set_batch_size(-1);
  EXPECT_EQ(Check(request).message(),
            "batch_size: must be between 0 and 4096, got -1");
  request = Request();
  request.set_num_workers(5000);
  EXPECT_EQ(Check(request).message(),
            "num_workers: must be between 0 and 1024, got 5000");
  request = Request();
  request.mutable_block()->set_n(-2);
  EXPECT_THAT(Check(request).message(), HasSubstr("block.n:"));
}

TEST_F(ValidateRequestTest, EmptyDatasetIsRejected) {
  auto request = Request();
  request.clear_rows();
  EXPECT_EQ(Check(request).message(),
            "rows: the dataset is empty (send rows, or name a dataset_id or a "
            "dataset_path)");
}

TEST_F(ValidateRequestTest, ColumnFirstSeenLaterIsMissingFromRowZero) {
  auto request = Request();
  (*request.mutable_rows(0)->mutable_fields()).erase("question");
  EXPECT_EQ(Check(request).message(),
            "block.prompt_template: column \"question\" is missing from row 0");
}

TEST_F(ValidateRequestTest, OneDatasetSourceOnly) {
  auto request = Request();
  request.set_dataset_id("uploaded");
  EXPECT_EQ(Check(request).message(),
            "dataset_id: give exactly one of rows, dataset_id and "
            "dataset_path");
  request.clear_rows();
  EXPECT_TRUE(ValidateDatasetSource(request).ok());
}

TEST_F(ValidateRequestTest, ModelIsRequired) {
  auto request = Request();
  request.mutable_block()->clear_model();
  EXPECT_THAT(Check(request).message(), HasSubstr("block.model: must name"));
}

TEST_F(ValidateRequestTest, BadJobIdIsRejected) {
  auto request = Request();
  request.set_job_id("has space");
  EXPECT_THAT(Check(request).message(), HasSubstr("job_id:"));
  // Ids name directories in the job store.
  request.set_job_id("..");
  EXPECT_THAT(Check(request).message(), HasSubstr("not starting with '.'"));
  request.set_job_id("run-1.a_b");
  EXPECT_TRUE(Check(request).ok());
}

TEST_F(ValidateRequestTest, BrokenTemplateSaysWhere) {
  auto request = Request();
  request.mutable_block()->set_prompt_template("{{question");
  EXPECT_THAT(
      Check(request).message(),
      HasSubstr("block.prompt_template: placeholder opened at offset 0"));
}

}  // namespace
}  // namespace sdg
