// Datasets: rows written by a builder read back by index, whatever the
// store; JSON lines split at any chunk boundary; bad lines named.
#include "server/store/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
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

// The one row `line` decodes to, or the decoder's error.
absl::StatusOr<google::protobuf::Struct> DecodeLine(const std::string& line) {
  JsonLinesDecoder decoder;
  std::optional<google::protobuf::Struct> decoded;
  auto keep = [&](google::protobuf::Struct row) {
    decoded = std::move(row);
    return absl::OkStatus();
  };
  if (absl::Status s = decoder.Feed(line + "\n", keep); !s.ok()) return s;
  if (!decoded.has_value()) return absl::NotFoundError("no row");
  return *decoded;
}

TEST(JsonLinesDecoderTest, RowsAreTheStructsProtobufsJsonParserGives) {
  for (
      const std::string line : {
          R"({"s": "x\u00e9\n", "n": 1.5, "i": -3, "u": 18446744073709551615, )"
          R"("b": true, "f": false, "z": null, "e": {}, "l": []})",
          R"({"o": {"k": [1, "a", {"d": [[null]]}], "t": "\ud83d\ude00"}})",
          R"({})",
      }) {
    google::protobuf::Struct expected;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(line, &expected).ok())
        << line;
    absl::StatusOr<google::protobuf::Struct> row = DecodeLine(line);
    ASSERT_TRUE(row.ok()) << row.status();
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(*row, expected))
        << line << "\n"
        << row->DebugString() << "\nexpected:\n"
        << expected.DebugString();
  }
}

TEST(JsonLinesDecoderTest, ARepeatedKeyTakesItsLastValue) {
  absl::StatusOr<google::protobuf::Struct> row =
      DecodeLine(R"({"k": {"a": 1}, "k": "last"})");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->fields().at("k").string_value(), "last");
}

TEST(JsonLinesDecoderTest, WhatIsNotAnObjectRowIsRefusedSayingWhy) {
  const std::pair<std::string, std::string> cases[] = {
      {"[1]", "got an array"},
      {"3", "got a number"},
      {R"("text")", "got a string"},
      {"null", "got null"},
      {R"({"q": 1)", "improper structure"},
      {R"({"q": 1} {"r": 2})", "improper structure"},
      {R"({"q": 1e999})", "parsing a number"},
      {"{\"q\": \"\xff\"}", "UTF-8"},
  };
  for (const auto& [line, why] : cases) {
    absl::StatusOr<google::protobuf::Struct> row = DecodeLine(line);
    EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_THAT(row.status().message(),
                HasSubstr("line 1: not a JSON object ("))
        << line;
    EXPECT_THAT(row.status().message(), HasSubstr(why)) << row.status();
  }
}

TEST(JsonLinesDecoderTest, ARowAsDeepAsAllowedSerializesAndParsesBack) {
  // `depth` levels: objects in objects, or arrays in arrays under the row.
  auto nested = [](int depth, bool arrays) {
    std::string line = arrays ? R"({"k": )" : "{";
    for (int i = 1; i < depth; ++i) line += arrays ? "[" : R"("k": {)";
    for (int i = 1; i < depth; ++i) line += arrays ? "]" : "}";
    return line + "}";
  };
  for (bool arrays : {false, true}) {
    absl::StatusOr<google::protobuf::Struct> deepest =
        DecodeLine(nested(32, arrays));
    ASSERT_TRUE(deepest.ok()) << deepest.status();
    google::protobuf::Struct parsed;
    EXPECT_TRUE(parsed.ParseFromString(deepest->SerializeAsString()));
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(parsed, *deepest));

    absl::StatusOr<google::protobuf::Struct> deeper =
        DecodeLine(nested(33, arrays));
    EXPECT_EQ(deeper.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(deeper.status().message(),
                HasSubstr("nested deeper than 32 levels"));
  }
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
