#include "client/row_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

std::string WriteInput(const std::string& text) {
  std::string path = testing::MakeTempDir() + "/in.jsonl";
  testing::WriteFile(path, text);
  return path;
}

TEST(ReadJsonlRowsTest, ReadsObjectsAndSkipsBlankLines) {
  auto rows = ReadJsonlRows(WriteInput("{\"a\":1}\n\n  \n{\"b\":\"x\"}\n"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1]["b"], "x");
}

TEST(ReadJsonlRowsTest, InvalidJsonNamesTheLine) {
  std::string path = WriteInput("{\"a\":1}\n{\"a\":\n");
  auto rows = ReadJsonlRows(path);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows.status().message(), path + ":2: not valid JSON");
}

TEST(ReadJsonlRowsTest, NonObjectLineNamesTheLineAndType) {
  std::string path = WriteInput("{\"a\":1}\n\n[1,2]\n");
  auto rows = ReadJsonlRows(path);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().message(),
            path + ":3: expected a JSON object, got an array");
}

TEST(ReadJsonlRowsTest, MissingFileIsNotFound) {
  auto rows = ReadJsonlRows("/nonexistent/in.jsonl");
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kNotFound);
}

TEST(RowJsonTest, StructRoundTripKeepsValues) {
  JsonRow row = JsonRow::parse(
      R"({"s":"x","i":3,"f":0.5,"b":false,"n":null,"l":[1,"y"],"o":{"k":"v"}})");
  google::protobuf::Struct message = JsonToStruct(row);
  EXPECT_EQ(message.fields().at("s").string_value(), "x");
  EXPECT_EQ(message.fields().at("i").number_value(), 3);
  google::protobuf::Value value;
  *value.mutable_struct_value() = message;
  JsonRow back = ValueToJson(value);
  EXPECT_EQ(back["l"][1], "y");
  EXPECT_EQ(back["o"]["k"], "v");
  EXPECT_TRUE(back["n"].is_null());
  EXPECT_EQ(back["f"], 0.5);
  // Whole numbers come back as integers, as they were written.
  EXPECT_EQ(back["i"].dump(), "3");
  EXPECT_EQ(back["l"][0].dump(), "1");
}

}  // namespace
}  // namespace sdg
