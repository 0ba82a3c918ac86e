#include "server/pipeline/prompt_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "google/protobuf/util/json_util.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

google::protobuf::Struct Row(const std::string& json) {
  google::protobuf::Struct row;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &row).ok());
  return row;
}

TEST(PromptTemplateTest, FillsPlaceholdersFromTheRow) {
  auto t = PromptTemplate::Parse("Q: {{question}}\nContext: {{ context }}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->columns(), ElementsAre("question", "context"));
  auto text = t->Render(Row(R"({"question":"Why?","context":"Because."})"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "Q: Why?\nContext: Because.");
}

TEST(PromptTemplateTest, ListsARepeatedColumnOnce) {
  auto t = PromptTemplate::Parse("{{a}} and {{a}} and {{b}}");
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(t->columns(), ElementsAre("a", "b"));
  EXPECT_EQ(*t->Render(Row(R"({"a":"x","b":"y"})")), "x and x and y");
}

TEST(PromptTemplateTest, BackslashEscapesLiteralBraces) {
  auto t = PromptTemplate::Parse(R"(JSON: \{{"k": {{v}}}})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->columns(), ElementsAre("v"));
  EXPECT_EQ(*t->Render(Row(R"({"v":"1"})")), R"(JSON: {{"k": 1}})");
}

TEST(PromptTemplateTest, TextWithoutPlaceholdersIsUnchanged) {
  auto t = PromptTemplate::Parse("just { text } here");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->columns().empty());
  EXPECT_EQ(*t->Render(Row("{}")), "just { text } here");
}

TEST(PromptTemplateTest, UnterminatedPlaceholderNamesItsOffset) {
  auto t = PromptTemplate::Parse("abc {{question");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("offset 4"));
}

TEST(PromptTemplateTest, EmptyPlaceholderIsAnError) {
  auto t = PromptTemplate::Parse("a {{ }} b");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("empty placeholder"));
}

TEST(PromptTemplateTest, MissingColumnIsNamed) {
  auto t = PromptTemplate::Parse("{{a}} {{b}}");
  ASSERT_TRUE(t.ok());
  google::protobuf::Struct row = Row(R"({"a":"x"})");
  const std::string* missing = t->FindMissingColumn(row);
  ASSERT_NE(missing, nullptr);
  EXPECT_EQ(*missing, "b");
  auto text = t->Render(row);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("\"b\""));
}

TEST(PromptTemplateTest, NonStringValuesAppearAsJsonText) {
  auto t = PromptTemplate::Parse("{{i}}|{{f}}|{{b}}|{{n}}|{{l}}|{{o}}");
  ASSERT_TRUE(t.ok());
  auto text = t->Render(
      Row(R"({"i":3,"f":0.1,"b":true,"n":null,"l":[1,"x"],"o":{"k":2}})"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, R"(3|0.1|true||[1,"x"]|{"k":2})");
}

}  // namespace
}  // namespace sdg
