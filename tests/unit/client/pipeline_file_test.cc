#include "client/pipeline_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kKnowledge =
    std::string(SDG_SOURCE_DIR) + "/examples/pipelines/knowledge";

class PipelineFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // ctest runs each test in its own process, several at once.
    dir_ = ::testing::TempDir() + "pipeline_file_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           "_" + std::to_string(getpid());
    std::filesystem::create_directories(dir_ + "/configs");
    testing::WriteFile(dir_ + "/configs/ask.yaml",
                       "system: null\ngeneration: \"Ask about {{topic}}.\"\n"
                       "start_tags: [\"<q>\"]\nend_tags: [\"</q>\"]\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A pipeline file with `blocks`, loaded.
  absl::StatusOr<PipelineFile> Load(const std::string& blocks) {
    const std::string path = dir_ + "/pipeline.yaml";
    testing::WriteFile(path, "version: \"1.0\"\nblocks:\n" + blocks);
    return LoadPipelineFile(path, options_);
  }
  std::string Error(const std::string& blocks) {
    absl::StatusOr<PipelineFile> file = Load(blocks);
    EXPECT_FALSE(file.ok());
    return std::string(file.status().message());
  }

  std::string dir_;
  PipelineFileOptions options_{"sim", "m", v1::API_COMPLETIONS};
};

TEST_F(PipelineFileTest, TheKnowledgeExampleBecomesItsSteps) {
  absl::StatusOr<PipelineFile> file =
      LoadPipelineFile(kKnowledge + "/pipeline.yaml", options_);
  ASSERT_TRUE(file.ok()) << file.status();
  const v1::Pipeline& pipeline = file->pipeline;
  ASSERT_EQ(pipeline.steps_size(), 11);
  EXPECT_EQ(pipeline.steps(0).duplicate_columns().columns_map(0).to(),
            "base_document");
  const v1::LlmStep& spellcheck = pipeline.steps(1).llm();
  EXPECT_EQ(spellcheck.block().model(), "m");
  EXPECT_EQ(spellcheck.block().backend(), "sim");
  EXPECT_EQ(spellcheck.block().max_tokens(), 512);
  EXPECT_EQ(spellcheck.block().temperature(), 0);
  EXPECT_THAT(spellcheck.prompt().generation(), HasSubstr("{{document}}"));
  EXPECT_THAT(spellcheck.tags().start_tags(), ElementsAre(""));
  // Rename's map in the file's order.
  const v1::ColumnMapStep& rename = pipeline.steps(3).rename_columns();
  ASSERT_EQ(rename.columns_map_size(), 2);
  EXPECT_EQ(rename.columns_map(1).from(), "corrected_document");
  const v1::LlmStep& knowledge = pipeline.steps(4).llm();
  EXPECT_THAT(knowledge.pattern().pattern(), HasSubstr("(?=\\[(?:Question"));
  EXPECT_THAT(knowledge.pattern().cleanup_tags(), ElementsAre("[END]"));
  EXPECT_THAT(pipeline.steps(4).drop_duplicates(), ElementsAre("question"));
  // filter_value: "YES" stays a string, 2.0 is a number.
  EXPECT_EQ(pipeline.steps(6).filter_by_value().values(0).string_value(),
            "YES");
  EXPECT_EQ(pipeline.steps(8).filter_by_value().values(0).number_value(), 2.0);
  EXPECT_EQ(pipeline.steps(8).filter_by_value().convert_dtype(), "float");
  EXPECT_THAT(pipeline.steps(8).drop_columns(),
              ElementsAre("feedback", "score"));
  ASSERT_EQ(file->warnings.size(), 1u);
  EXPECT_THAT(file->warnings[0], HasSubstr("datamixing is not run by sdgd"));
}

TEST_F(PipelineFileTest, GenKwargsAndNumSamples) {
  absl::StatusOr<PipelineFile> file = Load(R"(  - name: ask
    type: LLMBlock
    config:
      config_path: configs/ask.yaml
      output_cols: [question]
      gen_kwargs: {n: scaled, temperature: 0.7, model: other, stop: ["\n"]}
      batch_kwargs: {num_samples: 30}
)");
  ASSERT_TRUE(file.ok()) << file.status();
  const v1::LlmStep& llm = file->pipeline.steps(0).llm();
  EXPECT_TRUE(llm.scaled_n());
  EXPECT_EQ(llm.block().temperature(), 0.7);
  EXPECT_EQ(llm.block().model(), "other");
  EXPECT_THAT(llm.block().stop(), ElementsAre("\n"));
  EXPECT_EQ(llm.num_samples(), 30);
  EXPECT_THAT(llm.tags().start_tags(), ElementsAre("<q>"));
  EXPECT_EQ(llm.prompt().system(), "");
}

TEST_F(PipelineFileTest, ErrorsNameTheFileTheBlockAndTheKey) {
  const std::string file = dir_ + "/pipeline.yaml";
  EXPECT_EQ(Error(R"(  - name: ask
    type: LLMBlock
    config:
      config_path: configs/ask.yaml
      output_cols: [question]
      temperature: 1
)"),
            file +
                ": block 0 (ask): config: unknown key \"temperature\" "
                "(known: config_path, output_cols, model_prompt, "
                "gen_kwargs, parser_kwargs, batch_kwargs)");
  EXPECT_THAT(Error(R"(  - name: ask
    type: LLMBlock
    config:
      config_path: configs/missing.yaml
      output_cols: [question]
)"),
              HasSubstr(file +
                        ": block 0 (ask): config: config_path: cannot "
                        "open " +
                        dir_ + "/configs/missing.yaml"));
  EXPECT_THAT(Error(R"(  - name: pick
    type: IterBlock
    config: {}
)"),
              HasSubstr(file + ": block 0 (pick): type: unknown or "
                               "unsupported block type \"IterBlock\""));
  EXPECT_THAT(Error(R"(  - name: keep
    type: FilterByValueBlock
    config:
      filter_column: score
      operation: eq
)"),
              HasSubstr(file + ": block 0 (keep): config: needs "
                               "\"filter_value\""));
  EXPECT_THAT(Error(R"(  - name: ask
    type: LLMBlock
    config:
      config_path: configs/ask.yaml
      output_cols: [question]
      gen_kwargs: {n: many}
)"),
              HasSubstr("gen_kwargs: n: must be a number or \"scaled\""));
}

TEST_F(PipelineFileTest, JinjaStatementsAreRefused) {
  testing::WriteFile(dir_ + "/configs/loop.yaml",
                     "generation: \"{% for x in xs %}{{x}}{% endfor %}\"\n");
  EXPECT_THAT(Error(R"(  - name: loop
    type: LLMBlock
    config:
      config_path: configs/loop.yaml
      output_cols: [q]
)"),
              HasSubstr("configs/loop.yaml: generation: Jinja statements ({% "
                        "...) are not supported"));
}

TEST_F(PipelineFileTest, AFutureMajorVersionIsRefused) {
  const std::string path = dir_ + "/v2.yaml";
  testing::WriteFile(path, "version: \"2.0\"\nblocks: []\n");
  absl::StatusOr<PipelineFile> file = LoadPipelineFile(path, options_);
  EXPECT_THAT(file.status().message(),
              HasSubstr("version: version \"2.0\" is not 1.x"));
}

}  // namespace
}  // namespace sdg
