#include "server/pipeline/output_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using Row = ParsedValues;
Row R(std::vector<std::string> values) {
  return Row(values.begin(), values.end());
}

// The question/answer pattern of InstructLab's full knowledge pipeline: a
// lazy group up to a lookahead, which RE2 would reject.
constexpr char kQaPattern[] =
    R"(\[(?:Question|QUESTION)\]\s*(.*?)\s*\[(?:Answer|ANSWER)\]\s*(.*?)\s*)"
    R"((?=\[(?:Question|QUESTION)\]|$))";

std::vector<Row> ParseOrDie(const OutputParser& parser, std::string text) {
  absl::StatusOr<std::vector<Row>> rows = parser.Parse(text);
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *rows : std::vector<Row>{};
}

TEST(OutputParserTest, TagPairsGiveOneRowPerSpanStripped) {
  auto parser =
      OutputParser::Tags({"explanation", "judgment"},
                         {"[Start of Explanation]", "[Start of Answer]"},
                         {"[End of Explanation]", "[End of Answer]"});
  ASSERT_TRUE(parser.ok()) << parser.status();
  EXPECT_THAT(ParseOrDie(*parser,
                         "[Start of Explanation]\n It says so. \n"
                         "[End of Explanation]\n[Start of Answer] YES "
                         "[End of Answer]"),
              ElementsAre(R({"It says so.", "YES"})));
}

TEST(OutputParserTest, EmptyTagsTakeTheWholeReplyStripped) {
  auto parser = OutputParser::Tags({"spellcheck"}, {""}, {""});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "\n  The corrected document.\n\n"),
              ElementsAre(R({"The corrected document."})));
  // An empty generation is a row whose value is null (LLMBlock's None).
  EXPECT_THAT(ParseOrDie(*parser, ""), ElementsAre(Row{std::nullopt}));
}

TEST(OutputParserTest, SeveralSpansOfOneTagPairAreSeveralRows) {
  auto parser = OutputParser::Tags({"q"}, {"<q>"}, {"</q>"});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "<q> one </q> noise <q>two</q><q>"),
              ElementsAre(R({"one"}), R({"two"})));
}

TEST(OutputParserTest,
     ColumnsZipToTheShortestAndAColumnWithoutMatchGivesNoRow) {
  auto parser =
      OutputParser::Tags({"a", "b"}, {"<a>", "<b>"}, {"</a>", "</b>"});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "<a>1</a><a>2</a><b>x</b>"),
              ElementsAre(R({"1", "x"})));
  EXPECT_THAT(ParseOrDie(*parser, "<a>1</a> and no b"), IsEmpty());
}

TEST(OutputParserTest, TagsNeedAPair) {
  auto parser = OutputParser::Tags({"a"}, {}, {});
  ASSERT_FALSE(parser.ok());
  EXPECT_THAT(parser.status().message(),
              HasSubstr("at least one output column"));
}

TEST(OutputParserTest, PatternWithLookaheadSplitsQuestionsAndAnswers) {
  auto parser =
      OutputParser::Pattern({"question", "response"}, kQaPattern, {"[END]"});
  ASSERT_TRUE(parser.ok()) << parser.status();
  EXPECT_THAT(
      ParseOrDie(*parser,
                 "[Question]\nWhat is a tide?\n[Answer]\nThe rise and fall "
                 "of the sea. [END]\n\n[QUESTION] Why?\n[ANSWER] The Moon.\n"
                 "[END]\n"),
      ElementsAre(R({"What is a tide?", "The rise and fall of the sea. "}),
                  R({"Why?", "The Moon.\n"})));
}

TEST(OutputParserTest, PatternWithoutMatchGivesNoRow) {
  auto parser =
      OutputParser::Pattern({"question", "response"}, kQaPattern, {"[END]"});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "I cannot help with that."), IsEmpty());
}

TEST(OutputParserTest, OneGroupFillsTheFirstColumnWithoutCleanup) {
  // re.findall returns strings, not tuples, for one group: LLMBlock strips
  // them and does not remove the cleanup tags.
  auto parser = OutputParser::Pattern({"item"}, R"(- (.*?)\n)", {"[X]"});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "- a [X]\n-  b \n"),
              ElementsAre(R({"a [X]"}), R({"b"})));
  // With no group, the whole match.
  auto whole = OutputParser::Pattern({"word"}, R"(\d+)", {});
  ASSERT_TRUE(whole.ok());
  EXPECT_THAT(ParseOrDie(*whole, "7 and 42"), ElementsAre(R({"7"}), R({"42"})));
}

TEST(OutputParserTest, MoreColumnsThanGroupsGiveNoRow) {
  auto parser = OutputParser::Pattern({"a", "b", "c"}, R"((\w)=(\w))", {});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "x=1 y=2"), IsEmpty());
}

TEST(OutputParserTest, EmptyMatchesAreFoundOncePerPlaceAsPythonDoes) {
  // re.findall(r"a*", "baaa") == ["", "aaa", ""]
  auto parser = OutputParser::Pattern({"a"}, "a*", {});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "baaa"),
              ElementsAre(R({""}), R({"aaa"}), R({""})));
}

TEST(OutputParserTest, PatternsAreUnicodeAwareAsPythonStrPatterns) {
  auto parser = OutputParser::Pattern({"word"}, R"((\w+))", {});
  ASSERT_TRUE(parser.ok());
  EXPECT_THAT(ParseOrDie(*parser, "café naïve"),
              ElementsAre(R({"café"}), R({"naïve"})));
}

TEST(OutputParserTest, APatternThatDoesNotCompileNamesWhere) {
  auto parser = OutputParser::Pattern({"a"}, "(unclosed", {});
  ASSERT_FALSE(parser.ok());
  EXPECT_EQ(parser.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parser.status().message(),
              HasSubstr("pattern \"(unclosed\" does not compile at offset 9"));
}

TEST(OutputParserTest, CatastrophicBacktrackingStopsAtTheMatchLimit) {
  auto parser = OutputParser::Pattern({"a"}, "(a+)+$", {});
  ASSERT_TRUE(parser.ok());
  absl::StatusOr<std::vector<Row>> rows =
      parser->Parse(std::string(40, 'a') + "!");
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(rows.status().message(), HasSubstr("match limit"));
}

TEST(PythonStripTest, StripsWhatStrStripStrips) {
  EXPECT_EQ(PythonStrip(" \t\n\r\v\f x y \x1f"), "x y");
  EXPECT_EQ(PythonStrip("\xC2\xA0"
                        "x"
                        "\xE3\x80\x80"),
            "x");                                            // NBSP, U+3000
  EXPECT_EQ(PythonStrip("\xE2\x80\x89x\xE2\x80\xA8"), "x");  // U+2009, U+2028
  EXPECT_EQ(PythonStrip("caf\xC3\xA9"), "caf\xC3\xA9");      // é is not space
  EXPECT_EQ(PythonStrip("   "), "");
}

}  // namespace
}  // namespace sdg
