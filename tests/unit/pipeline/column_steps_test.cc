#include "server/pipeline/column_steps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"

namespace sdg {
namespace {

using google::protobuf::Value;
using ::testing::HasSubstr;

Row ParseRow(const std::string& json) {
  Row row;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &row).ok())
      << json;
  return row;
}

std::string Json(const Row& row) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(row, &json);
  return json;
}

// Rows are maps: compared as messages, printed as JSON when they differ.
MATCHER_P(IsRow, json, absl::StrCat("is the row ", json)) {
  *result_listener << "is " << Json(arg);
  return google::protobuf::util::MessageDifferencer::Equals(arg,
                                                            ParseRow(json));
}

Value S(std::string text) {
  Value value;
  value.set_string_value(std::move(text));
  return value;
}
Value N(double number) {
  Value value;
  value.set_number_value(number);
  return value;
}

// Keep() over `row_json` for a filter built from the rest.
absl::StatusOr<bool> Keeps(const std::string& row_json,
                           std::vector<Value> values, FilterOperation operation,
                           ConvertType convert = ConvertType::kNone) {
  absl::StatusOr<ValueFilter> filter = ValueFilter::Create(
      "c", std::move(values), operation, convert, std::nullopt);
  if (!filter.ok()) return filter.status();
  Row row = ParseRow(row_json);
  return filter->Keep(row);
}

TEST(ValueFilterTest, EachOperationComparesAsPythonsOperatorModule) {
  using Op = FilterOperation;
  EXPECT_TRUE(*Keeps(R"({"c": "YES"})", {S("YES")}, Op::kEq));
  EXPECT_FALSE(*Keeps(R"({"c": "NO"})", {S("YES")}, Op::kEq));
  EXPECT_TRUE(*Keeps(R"({"c": "NO"})", {S("YES")}, Op::kNe));
  EXPECT_TRUE(*Keeps(R"({"c": 3})", {N(2)}, Op::kGt));
  EXPECT_FALSE(*Keeps(R"({"c": 2})", {N(2)}, Op::kGt));
  EXPECT_TRUE(*Keeps(R"({"c": 2})", {N(2)}, Op::kGe));
  EXPECT_TRUE(*Keeps(R"({"c": 1})", {N(2)}, Op::kLt));
  EXPECT_TRUE(*Keeps(R"({"c": 2})", {N(2)}, Op::kLe));
  EXPECT_TRUE(*Keeps(R"({"c": "apple pie"})", {S("pie")}, Op::kContains));
  EXPECT_TRUE(*Keeps(R"({"c": ["a", "b"]})", {S("b")}, Op::kContains));
  // A string is never equal to a number, as in Python ("2.0" != 2.0).
  EXPECT_FALSE(*Keeps(R"({"c": "2.0"})", {N(2)}, Op::kEq));
  // True == 1 in Python.
  EXPECT_TRUE(*Keeps(R"({"c": true})", {N(1)}, Op::kEq));
}

TEST(ValueFilterTest, AnyOfSeveralValuesKeepsTheRow) {
  EXPECT_TRUE(*Keeps(R"({"c": "dublin"})", {S("boston"), S("dublin")},
                     FilterOperation::kEq));
  EXPECT_FALSE(*Keeps(R"({"c": "paris"})", {S("boston"), S("dublin")},
                      FilterOperation::kEq));
}

TEST(ValueFilterTest, ConvertedColumnTakesItsValueOrTheDefault) {
  absl::StatusOr<ValueFilter> filter =
      ValueFilter::Create("score", {N(2.0)}, FilterOperation::kEq,
                          ConvertType::kFloat, std::nullopt);
  ASSERT_TRUE(filter.ok());
  Row row = ParseRow(R"({"score": " 2.0\n"})");
  EXPECT_TRUE(*filter->Keep(row));
  EXPECT_THAT(row, IsRow(R"({"score":2})"));
  Row unreadable = ParseRow(R"({"score": "two"})");
  EXPECT_FALSE(*filter->Keep(unreadable));
  EXPECT_THAT(unreadable, IsRow(R"({"score":0})"));

  // A given default_value, converted too.
  absl::StatusOr<ValueFilter> with_default = ValueFilter::Create(
      "rating", {N(1)}, FilterOperation::kEq, ConvertType::kInt, S("1"));
  ASSERT_TRUE(with_default.ok());
  Row odd = ParseRow(R"({"rating": "1.0"})");  // int("1.0") raises
  EXPECT_TRUE(*with_default->Keep(odd));
}

TEST(ValueFilterTest, ConversionsFollowPythonsFloatIntAndBool) {
  auto convert = [](Value value, ConvertType type) {
    std::optional<Value> converted = ConvertValue(value, type);
    return converted.has_value() ? converted->DebugString() : "fails";
  };
  EXPECT_EQ(convert(S("1_000"), ConvertType::kInt), N(1000).DebugString());
  EXPECT_EQ(convert(S("-7"), ConvertType::kInt), N(-7).DebugString());
  EXPECT_EQ(convert(N(2.9), ConvertType::kInt), N(2).DebugString());
  EXPECT_EQ(convert(S("2.5"), ConvertType::kInt), "fails");
  EXPECT_EQ(convert(S("1e3"), ConvertType::kFloat), N(1000).DebugString());
  EXPECT_EQ(convert(S("abc"), ConvertType::kFloat), "fails");
  EXPECT_EQ(convert(S(""), ConvertType::kFloat), "fails");
  Value no;
  no.set_bool_value(false);
  Value yes;
  yes.set_bool_value(true);
  // bool("False") is True: any non-empty string.
  EXPECT_EQ(convert(S("False"), ConvertType::kBool), yes.DebugString());
  EXPECT_EQ(convert(S(""), ConvertType::kBool), no.DebugString());
  EXPECT_EQ(convert(N(0), ConvertType::kBool), no.DebugString());
}

TEST(ValueFilterTest, RowsThatCannotBeComparedFailWithTheColumnNamed) {
  absl::StatusOr<bool> keep =
      Keeps(R"({"c": "high"})", {N(2)}, FilterOperation::kGt);
  ASSERT_FALSE(keep.ok());
  EXPECT_THAT(
      keep.status().message(),
      HasSubstr("column \"c\": cannot order a string against a number"));
  keep = Keeps(R"({"other": 1})", {N(2)}, FilterOperation::kEq);
  ASSERT_FALSE(keep.ok());
  EXPECT_THAT(keep.status().message(), HasSubstr("no column \"c\""));
}

TEST(ValueFilterTest, UnknownNamesAreRejected) {
  EXPECT_THAT(ParseFilterOperation("between").status().message(),
              HasSubstr("not one of eq, ne, gt, ge, lt, le, contains"));
  EXPECT_THAT(ParseConvertType("str").status().message(),
              HasSubstr("not one of float, int, bool"));
  EXPECT_EQ(*ParseConvertType(""), ConvertType::kNone);
}

TEST(ColumnStepsTest, DuplicateCopiesAndRefusesToOverwrite) {
  Row row = ParseRow(R"({"document": "d"})");
  ASSERT_TRUE(DuplicateColumns({{"document", "base_document"}}, row).ok());
  EXPECT_THAT(row, IsRow(R"({"base_document":"d","document":"d"})"));
  EXPECT_THAT(DuplicateColumns({{"document", "base_document"}}, row).message(),
              HasSubstr("already has a column \"base_document\""));
}

TEST(ColumnStepsTest, RenameAppliesEveryNameAtOnce) {
  // InstructLab's knowledge pipeline: document -> raw_document and
  // corrected_document -> document in one step.
  Row row = ParseRow(R"({"document": "old", "corrected_document": "new"})");
  ASSERT_TRUE(RenameColumns({{"document", "raw_document"},
                             {"corrected_document", "document"}},
                            row)
                  .ok());
  EXPECT_THAT(row, IsRow(R"({"document":"new","raw_document":"old"})"));
  EXPECT_THAT(RenameColumns({{"missing", "x"}}, row).message(),
              HasSubstr("no column \"missing\""));
}

TEST(ColumnStepsTest, CombineJoinsStringsWithTheSeparator) {
  Row row = ParseRow(R"({"a": "x", "b": "y", "n": 1})");
  ASSERT_TRUE(CombineColumns({"a", "b"}, "ab", "\n\n", row).ok());
  EXPECT_EQ(row.fields().at("ab").string_value(), "x\n\ny");
  EXPECT_THAT(CombineColumns({"a", "n"}, "an", " ", row).message(),
              HasSubstr("column \"n\" is a number, not a string"));
}

TEST(ColumnStepsTest, FlattenGivesOneRowPerListedColumn) {
  Row row = ParseRow(
      R"({"spellcheck": "fixed", "base_document": "orig", "domain": "d"})");
  absl::StatusOr<std::vector<Row>> rows =
      FlattenColumns({"spellcheck", "base_document"}, "corrected_document",
                     "dataset_type", row);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_THAT((*rows)[0],
              IsRow(R"({"corrected_document":"fixed",)"
                    R"("dataset_type":"spellcheck","domain":"d"})"));
  EXPECT_THAT((*rows)[1],
              IsRow(R"({"corrected_document":"orig",)"
                    R"("dataset_type":"base_document","domain":"d"})"));
  EXPECT_THAT(
      FlattenColumns({"spellcheck"}, "domain", "t", row).status().message(),
      HasSubstr("\"domain\" is a column that is not flattened"));
}

TEST(ColumnStepsTest, DropColumnsDropsThoseTheRowHas) {
  Row row = ParseRow(R"({"a": 1, "b": 2})");
  DropColumns({"a", "__index_level_0__"}, row);
  EXPECT_THAT(row, IsRow(R"({"b":2})"));
}

TEST(ColumnStepsTest, DuplicateKeysAreEqualExactlyForEqualValues) {
  auto key = [](const std::string& json) {
    return *DuplicateKey({"q", "n"}, ParseRow(json));
  };
  EXPECT_EQ(key(R"({"q": "x", "n": 2, "other": 1})"),
            key(R"({"q": "x", "n": 2.0, "other": 2})"));
  EXPECT_NE(key(R"({"q": "x", "n": 2})"), key(R"({"q": "x", "n": "2"})"));
  // Length-prefixed: ("ab", "c") and ("a", "bc") differ.
  EXPECT_NE(*DuplicateKey({"a", "b"}, ParseRow(R"({"a": "ab", "b": "c"})")),
            *DuplicateKey({"a", "b"}, ParseRow(R"({"a": "a", "b": "bc"})")));
  EXPECT_EQ(key(R"({"q": {"k": 1, "j": [1, "a"]}, "n": null})"),
            key(R"({"q": {"j": [1, "a"], "k": 1}, "n": null})"));
  EXPECT_THAT(DuplicateKey({"q"}, ParseRow("{}")).status().message(),
              HasSubstr("drop_duplicates: the row has no column \"q\""));
}

}  // namespace
}  // namespace sdg
