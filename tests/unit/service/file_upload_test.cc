#include "server/service/file_upload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/jobs/batch_line.h"
#include "server/store/memory_job_store.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FileUploadTest : public ::testing::Test {
 protected:
  std::unique_ptr<FileUpload> Upload(FileUpload::Limits limits = {}) {
    limits.bytes_flag = "--openai_max_file_mib";
    limits.lines_flag = "--openai_max_file_lines";
    return std::make_unique<FileUpload>(store_, "file-1", "alice", "in.jsonl",
                                        "batch", limits);
  }
  std::vector<std::string> StoredLines() {
    std::vector<std::string> lines;
    auto file = store_.OpenUpload("file-1");
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return lines;
    auto rows = (*file)->ReadRows(0, (*file)->row_count());
    EXPECT_TRUE(rows.ok());
    for (const auto& row : *rows) lines.emplace_back(RowLine(row));
    return lines;
  }

  MemoryJobStore store_;
};

TEST_F(FileUploadTest, LinesSplitAcrossChunksAreStoredAsSent) {
  std::unique_ptr<FileUpload> upload = Upload();
  for (absl::string_view chunk :
       {"{\"a\"", ": 1}\r\nnot json\n\n{\"c\"", ":3}"}) {
    ASSERT_TRUE(upload->Take(chunk).ok());
  }
  auto stored = upload->Complete();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->dataset.rows(), 4);
  EXPECT_EQ(stored->dataset.bytes(), 27);
  EXPECT_EQ(stored->dataset.filename(), "in.jsonl");
  EXPECT_EQ(stored->dataset.purpose(), "batch");
  EXPECT_EQ(stored->tenant, "alice");
  // A CR before the newline is the line break's; a bad or blank line is
  // kept, for the batch to name by its number.
  EXPECT_THAT(StoredLines(),
              ElementsAre("{\"a\": 1}", "not json", "", "{\"c\":3}"));
}

TEST_F(FileUploadTest, LimitsNameTheirFlagAndStoreNothing) {
  FileUpload::Limits limits;
  limits.max_lines = 2;
  {
    std::unique_ptr<FileUpload> upload = Upload(limits);
    absl::Status status = upload->Take("1\n2\n3\n");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("more than 2 lines (the server's "
                                            "--openai_max_file_lines)"));
  }
  limits = {};
  limits.upload.max_upload_bytes = 4;
  {
    std::unique_ptr<FileUpload> upload = Upload(limits);
    EXPECT_THAT(upload->Take("12345").message(),
                HasSubstr("larger than 4 bytes (the server's "
                          "--openai_max_file_mib)"));
  }
  {
    std::unique_ptr<FileUpload> upload = Upload();
    EXPECT_THAT(upload->Complete().status().message(),
                HasSubstr("the file is empty"));
  }
  EXPECT_EQ(store_.FindUpload("file-1").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sdg
