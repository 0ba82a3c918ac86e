// Datasets: rows written by a builder read back by index, whatever the
// store; JSON lines split at any chunk boundary; bad lines named.
#include "server/jobs/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

google::protobuf::Struct Row(int i) {
  google::protobuf::Struct row;
  (*row.mutable_fields())["id"].set_number_value(i);
  (*row.mutable_fields())["text"].set_string_value(std::string(i % 7, 'x'));
  return row;
}

void ExpectRows(const Dataset& dataset, int64_t first, int64_t count) {
  auto rows = dataset.ReadRows(first, count);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_EQ((*rows)[i].fields().at("id").number_value(), first + i);
  }
}

TEST(DatasetTest, FileAndMemoryDatasetsReadBackTheSameRows) {
  std::string dir = testing::MakeTempDir();
  auto file_builder = DatasetBuilder::InDirectory(dir);
  ASSERT_TRUE(file_builder.ok());
  auto memory_builder = DatasetBuilder::InMemory();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE((*file_builder)->Add(Row(i)).ok());
    ASSERT_TRUE(memory_builder->Add(Row(i)).ok());
  }
  for (DatasetBuilder* builder : {file_builder->get(), memory_builder.get()}) {
    auto dataset = builder->Finish();
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_EQ((*dataset)->row_count(), 1000);
    ExpectRows(**dataset, 0, 8);
    ExpectRows(**dataset, 992, 8);
    ExpectRows(**dataset, 500, 1);
    EXPECT_EQ((*dataset)->ReadRows(999, 2).status().code(),
              absl::StatusCode::kOutOfRange);
  }
  // Reopened from its files alone.
  auto reopened = Dataset::OpenDirectory(dir);
  ASSERT_TRUE(reopened.ok());
  ExpectRows(**reopened, 123, 5);
}

TEST(DatasetTest, InfoSaysWhichRowFirstLacksAColumn) {
  DatasetInfo info;
  google::protobuf::Struct a = Row(0);
  google::protobuf::Struct b = Row(1);
  (*b.mutable_fields())["late"].set_bool_value(true);
  b.mutable_fields()->erase("text");
  info.Add(a);
  info.Add(b);
  info.Add(a);
  EXPECT_EQ(info.FirstRowMissing("id"), std::nullopt);
  EXPECT_EQ(info.FirstRowMissing("text"), 1);
  EXPECT_EQ(info.FirstRowMissing("late"), 0);
  EXPECT_EQ(info.FirstRowMissing("never"), 0);
  auto copy = DatasetInfo::FromJson(info.ToJson());
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->columns, info.columns);
  EXPECT_EQ(copy->rows, 3);
}

TEST(JsonLinesDecoderTest, LinesSplitAcrossChunksAreWhole) {
  const std::string text = "{\"q\": \"a\"}\n\n{\"q\": \"b\"}\r\n{\"q\": \"c\"}";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    JsonLinesDecoder decoder;
    std::vector<std::string> seen;
    auto add = [&](google::protobuf::Struct row) {
      seen.push_back(row.fields().at("q").string_value());
      return absl::OkStatus();
    };
    ASSERT_TRUE(decoder.Feed(text.substr(0, cut), add).ok());
    ASSERT_TRUE(decoder.Feed(text.substr(cut), add).ok());
    ASSERT_TRUE(decoder.Finish(add).ok());
    EXPECT_THAT(seen, ::testing::ElementsAre("a", "b", "c")) << cut;
    EXPECT_EQ(decoder.bytes(), static_cast<int64_t>(text.size()));
  }
}

TEST(JsonLinesDecoderTest, BadLineIsNamedByItsNumber) {
  JsonLinesDecoder decoder;
  auto add = [](google::protobuf::Struct) { return absl::OkStatus(); };
  absl::Status status = decoder.Feed("{\"q\": 1}\n\n[1, 2]\n{\"q\": 2}\n", add);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("line 3: not a JSON object"));
}

TEST(JsonLinesDecoderTest, ImportNamesTheFileAndKeepsStoreErrorsApart) {
  std::string path = testing::MakeTempDir() + "/in.jsonl";
  std::ofstream(path) << "{\"q\": 1}\nnot json\n";
  auto builder = DatasetBuilder::InMemory();
  absl::Status status = ImportJsonLinesFile(path, *builder);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(path + ": line 2"));
}

}  // namespace
}  // namespace sdg
