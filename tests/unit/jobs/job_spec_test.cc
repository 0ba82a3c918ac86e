#include "server/jobs/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
    if (absl::Status s = ValidateDatasetSource(request, request.rows_size());
        !s.ok())
      return s;
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
  EXPECT_TRUE(ValidateDatasetSource(request, 0).ok());
}

TEST_F(ValidateRequestTest, AnEmptyModelIsLeftForTheServiceToChoose) {
  auto request = Request();
  request.mutable_block()->clear_model();
  auto spec = ValidateRequest(request, backends_, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->block.model(), "");
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

TEST_F(ValidateRequestTest, SamplingOutsideItsRangeNamesTheField) {
  auto request = Request();
  request.mutable_block()->set_temperature(std::nan(""));
  EXPECT_EQ(Check(request).message(),
            "block.temperature: must be a finite number >= 0, got nan");
  request.mutable_block()->set_temperature(
      std::numeric_limits<double>::infinity());
  EXPECT_THAT(Check(request).message(), HasSubstr("block.temperature"));
  request.mutable_block()->set_temperature(-0.5);
  EXPECT_THAT(Check(request).message(), HasSubstr("got -0.5"));
  request.mutable_block()->set_temperature(0);
  EXPECT_TRUE(Check(request).ok());
  for (double top_p : {0.0, 1.5, std::nan("")}) {
    request.mutable_block()->set_top_p(top_p);
    EXPECT_THAT(Check(request).message(),
                HasSubstr("block.top_p: must be in (0, 1]"));
  }
  request.mutable_block()->set_top_p(1);
  EXPECT_TRUE(Check(request).ok());
}

TEST_F(ValidateRequestTest, UnknownEnumValuesAreRejected) {
  auto request = Request();
  request.mutable_block()->set_api(static_cast<v1::Api>(99));
  EXPECT_EQ(Check(request).message(), "block.api: unknown value 99");
}

TEST_F(ValidateRequestTest, IdentifyingStringsAndStopsAreBounded) {
  auto request = Request();
  request.mutable_block()->set_name(std::string(5 << 20, 'n'));
  EXPECT_EQ(Check(request).message(),
            "block.name: at most 256 bytes, got 5242880");
  request.mutable_block()->set_name("ok");
  request.mutable_block()->set_output_column(std::string(300, 'o'));
  EXPECT_THAT(Check(request).message(), HasSubstr("block.output_column"));
  request.mutable_block()->clear_output_column();
  for (int i = 0; i < 33; ++i) request.mutable_block()->add_stop("###");
  EXPECT_EQ(Check(request).message(),
            "block.stop: at most 32 sequences, got 33");
  request.mutable_block()->clear_stop();
  request.mutable_block()->add_stop(std::string(1000, 's'));
  EXPECT_EQ(Check(request).message(),
            "block.stop[0]: at most 256 bytes, got 1000");
}

TEST_F(ValidateRequestTest, OutputColumnMustNotOverwriteAnInputColumn) {
  auto request = Request();
  request.mutable_block()->set_output_column("question");
  EXPECT_EQ(Check(request).message(),
            "block.output_column: \"question\" is a column of the dataset "
            "and would be overwritten; choose another name");
}

TEST_F(ValidateRequestTest, ATemplateOverThePromptLimitIsRejected) {
  limits_.max_prompt_bytes = 64;
  auto request = Request();
  request.mutable_block()->set_prompt_template(std::string(65, 't'));
  EXPECT_THAT(Check(request).message(),
              HasSubstr("block.prompt_template: with the system_prompt, "
                        "longer than 64 bytes (the server's "
                        "--max_prompt_bytes)"));
}

TEST_F(ValidateRequestTest, EchoedCallerTextIsCutShort) {
  auto request = Request();
  request.mutable_block()->set_backend(std::string(1 << 20, 'b'));
  const std::string message(Check(request).message());
  EXPECT_LT(message.size(), 200u);
  EXPECT_THAT(message, HasSubstr("(1048576 bytes)"));
}

}  // namespace
}  // namespace sdg

namespace sdg {
namespace {

class ValidatePipelineTest : public ::testing::Test {
 protected:
  absl::StatusOr<JobSpec> Validate(const std::string& steps_json,
                                   int num_instructions = 0) {
    v1::GenerateJobRequest request;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                    R"({"pipeline": {"steps": )" + steps_json + "}}", &request)
                    .ok());
    request.set_num_instructions_to_generate(num_instructions);
    return ValidateRequest(request, {"sim", "other"}, ValidationLimits{});
  }
  std::string Error(const std::string& steps_json, int num_instructions = 0) {
    absl::StatusOr<JobSpec> spec = Validate(steps_json, num_instructions);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(spec.status().message());
  }

  static constexpr char kLlm[] =
      R"({"name": "gen", "llm": {"block": {"model": "m",
          "prompt_template": "{{x}}"}, "output_columns": ["q"]}})";
};

TEST_F(ValidatePipelineTest, StagesEndAtDropDuplicates) {
  absl::StatusOr<JobSpec> spec = Validate(
      R"([{"name": "a", "duplicate_columns": {"columns_map": [{"from": "x", "to": "y"}]}},
          {"name": "b", "rename_columns": {"columns_map": [{"from": "y", "to": "z"}]},
           "drop_duplicates": ["z"]},
          {"name": "c", "combine_columns": {"columns": ["x", "z"], "output_column": "xz"}}])");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->pipeline->stages.size(), 2u);
  EXPECT_EQ(spec->pipeline->stages[0].end_step, 2);
  EXPECT_EQ(spec->pipeline->stages[1].first_step, 2);
  EXPECT_EQ(spec->pipeline->stages[1].end_step, 3);
  EXPECT_EQ(spec->pipeline->BarrierStep(0).name, "b");
  // CombineColumnsBlock's separator when none is given.
  EXPECT_EQ(std::get<CombineStepSpec>(spec->pipeline->steps[2].kind).separator,
            "\n\n");
}

TEST_F(ValidatePipelineTest,
       ALastStepWithDropDuplicatesIsFollowedByAnEmptyStage) {
  absl::StatusOr<JobSpec> spec = Validate(
      R"([{"name": "a", "duplicate_columns": {"columns_map": [{"from": "x", "to": "y"}]},
           "drop_duplicates": ["y"]}])");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->pipeline->stages.size(), 2u);
  EXPECT_EQ(spec->pipeline->stages[1].first_step, 1);
  EXPECT_EQ(spec->pipeline->stages[1].end_step, 1);
}

TEST_F(ValidatePipelineTest, PromptPartsAreJoinedAsLlmBlockJoinsThem) {
  absl::StatusOr<JobSpec> spec = Validate(
      R"([{"name": "gen", "llm": {"block": {"model": "m"}, "output_columns": ["q"],
           "prompt": {"system": "S {{a}}", "principles": "P", "generation": "G {{b}}"}}}])");
  ASSERT_TRUE(spec.ok()) << spec.status();
  google::protobuf::Struct row;
  (*row.mutable_fields())["a"].set_string_value("1");
  (*row.mutable_fields())["b"].set_string_value("2");
  EXPECT_EQ(*spec->pipeline->steps[0].llm()->prompt_template.Render(row),
            "S 1\n\nP\n\nG 2");
}

TEST_F(ValidatePipelineTest, ScaledNTakesNumInstructionsToGenerate) {
  const std::string scaled =
      R"([{"name": "gen", "llm": {"block": {"model": "m", "prompt_template": "{{x}}"},
           "output_columns": ["q"], "scaled_n": true}}])";
  absl::StatusOr<JobSpec> spec = Validate(scaled, 5);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->pipeline->steps[0].llm()->block.n(), 5);
  EXPECT_THAT(Error(scaled, 0),
              HasSubstr("num_instructions_to_generate: must be between 1 and "
                        "128 for pipeline.steps[0] (\"gen\").llm.scaled_n"));
}

TEST_F(ValidatePipelineTest, ErrorsNameTheStepAndTheField) {
  EXPECT_THAT(Error(R"([{"name": "gen", "llm": {"block": {"model": "m",
                  "prompt_template": "{{x}}"}, "output_columns": ["q", "a"],
                  "pattern": {"pattern": "(?<=x"}}}])"),
              HasSubstr("pipeline.steps[0] (\"gen\").llm.pattern: "));
  EXPECT_THAT(
      Error(R"([{"name": "gen", "llm": {"block": {"model": "m",
                  "prompt_template": "{{x}}", "backend": "nope"},
                  "output_columns": ["q"]}}])"),
      HasSubstr("pipeline.steps[0] (\"gen\").llm.block.backend: "
                "unknown backend \"nope\"; this server has: other, sim"));
  EXPECT_THAT(Error(R"([{"name": "gen", "llm": {"block": {"model": "m",
                  "prompt_template": "{{x}}", "temperature": -1},
                  "output_columns": ["q"]}}])"),
              HasSubstr("pipeline.steps[0] (\"gen\").llm.block.temperature"));
  EXPECT_THAT(Error(R"([{"name": "f", "filter_by_value": {"column": "c",
                  "values": ["x"], "operation": "startswith"}}])"),
              HasSubstr("pipeline.steps[0] (\"f\").filter_by_value.operation"));
  EXPECT_THAT(Error(R"([{"name": "f", "filter_by_value": {"column": "c",
                  "values": ["two"], "operation": "eq", "convert_dtype": "int"}}])"),
              HasSubstr("pipeline.steps[0] (\"f\").filter_by_value.values"));
  EXPECT_THAT(
      Error(R"([{"name": "x"}])"),
      HasSubstr("pipeline.steps[0]: must be one of llm, filter_by_value"));
  EXPECT_THAT(
      Error(std::string("[") + kLlm + "," + kLlm + "]"),
      HasSubstr("pipeline.steps[1].name: \"gen\" names an earlier step"));
  EXPECT_THAT(Error("[]"), HasSubstr("pipeline.steps: must not be empty"));
  EXPECT_THAT(Error(R"([{"name": "gen", "llm": {"block": {"model": "m"},
                  "output_columns": ["q"]}}])"),
              HasSubstr("pipeline.steps[0] (\"gen\").llm.prompt: give "
                        "block.prompt_template or the prompt's parts"));
}

TEST_F(ValidatePipelineTest, ABlockAndAPipelineTogetherAreRefused) {
  v1::GenerateJobRequest request;
  request.mutable_block()->set_prompt_template("{{x}}");
  request.mutable_pipeline();
  absl::StatusOr<JobSpec> spec =
      ValidateRequest(request, {"sim"}, ValidationLimits{});
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("pipeline: give either block or pipeline, not both"));
}

}  // namespace
}  // namespace sdg
