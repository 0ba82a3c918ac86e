#include "client/ordered_output.h"

#include <gtest/gtest.h>

#include <sstream>

namespace sdg {
namespace {

std::vector<JsonRow> Inputs(int count) {
  std::vector<JsonRow> rows;
  for (int i = 0; i < count; ++i)
    rows.push_back(JsonRow{{"id", i}, {"q", "x"}});
  return rows;
}

v1::ShardResult Result(int first, int count, int samples) {
  v1::ShardResult result;
  for (int r = first; r < first + count; ++r) {
    for (int s = samples - 1; s >= 0; --s) {  // samples arrive out of order
      v1::ResultRow* row = result.add_rows();
      row->set_row_index(r);
      row->set_sample_index(s);
      (*row->mutable_columns()->mutable_fields())["id"].set_number_value(r);
      (*row->mutable_columns()->mutable_fields())["out"].set_string_value(
          "r" + std::to_string(r) + "s" + std::to_string(s));
    }
  }
  return result;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(OrderedOutputTest, WritesInInputOrderWhateverTheArrivalOrder) {
  std::vector<JsonRow> inputs = Inputs(6);
  std::ostringstream out, errors;
  OrderedOutput output(inputs, "out", 1, out, errors);
  output.AddResult(Result(4, 2, 1));
  EXPECT_EQ(out.str(), "");  // rows 0-3 are not there yet
  output.AddResult(Result(0, 2, 1));
  output.AddResult(Result(2, 2, 1));
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(lines[i], R"({"id":)" + std::to_string(i) +
                            R"(,"q":"x","out":"r)" + std::to_string(i) +
                            R"(s0"})");
  }
  EXPECT_EQ(output.lines_written(), 6);
}

TEST(OrderedOutputTest, SamplesOfARowAreWrittenInSampleOrder) {
  std::vector<JsonRow> inputs = Inputs(1);
  std::ostringstream out, errors;
  OrderedOutput output(inputs, "out", 3, out, errors);
  output.AddResult(Result(0, 1, 3));
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("r0s0"), std::string::npos);
  EXPECT_NE(lines[2].find("r0s2"), std::string::npos);
}

TEST(OrderedOutputTest, FailedRowsGoToTheErrorsFileInOrder) {
  std::vector<JsonRow> inputs = Inputs(4);
  std::ostringstream out, errors;
  OrderedOutput output(inputs, "out", 1, out, errors);
  v1::ShardError error;
  error.set_first_row(2);
  error.set_row_count(2);
  error.set_code(14);
  error.set_message("backend down");
  output.AddError(error);
  output.AddResult(Result(0, 2, 1));
  EXPECT_EQ(Lines(out.str()).size(), 2u);
  std::vector<std::string> failed = Lines(errors.str());
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(
      failed[0],
      R"({"row_index":2,"code":"UNAVAILABLE","message":"backend down","row":{"id":2,"q":"x"}})");
  EXPECT_EQ(output.rows_failed(), 2);
}

TEST(OrderedOutputTest, MissingRowsAreReportedAtTheEnd) {
  std::vector<JsonRow> inputs = Inputs(3);
  std::ostringstream out, errors;
  OrderedOutput output(inputs, "out", 1, out, errors);
  output.AddResult(Result(1, 1, 1));
  output.FinishMissing("not generated: job ended JOB_STATE_CANCELLED");
  EXPECT_EQ(Lines(out.str()).size(), 1u);
  std::vector<std::string> failed = Lines(errors.str());
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_NE(failed[0].find(R"("row_index":0)"), std::string::npos);
  EXPECT_NE(failed[1].find(R"("row_index":2)"), std::string::npos);
  EXPECT_NE(failed[1].find("JOB_STATE_CANCELLED"), std::string::npos);
}

TEST(OrderedOutputTest, APartialFinishWritesWhatCameInOrderAndNoMissingRow) {
  std::vector<JsonRow> inputs = Inputs(5);
  std::ostringstream out, errors;
  OrderedOutput output(inputs, "out", 2, out, errors);
  output.AddResult(Result(1, 1, 2));  // row 1, both samples
  output.AddResult(Result(4, 1, 1));  // row 4, one sample of two
  v1::ShardError error;
  error.set_first_row(3);
  error.set_row_count(1);
  error.set_code(14);
  error.set_message("backend down");
  output.AddError(error);
  EXPECT_EQ(out.str(), "");  // row 0 holds the rest back
  // Following ended with rows 0, 2 and 4 not yet generated.
  EXPECT_EQ(output.FinishPartial(), 3);
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("r1s0"), std::string::npos);
  EXPECT_NE(lines[1].find("r1s1"), std::string::npos);
  std::vector<std::string> failed = Lines(errors.str());
  ASSERT_EQ(failed.size(), 1u);  // the row that failed, and no other
  EXPECT_NE(failed[0].find(R"("row_index":3)"), std::string::npos);
  EXPECT_EQ(output.rows_failed(), 1);
  EXPECT_EQ(output.lines_written(), 2);
}

}  // namespace
}  // namespace sdg
