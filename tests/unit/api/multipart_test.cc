#include "server/api/multipart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// As the OpenAI SDKs (undici's FormData) send an upload.
constexpr char kContentType[] =
    "multipart/form-data; boundary=----formdata-undici-0123456789";
constexpr char kBody[] =
    "------formdata-undici-0123456789\r\n"
    "Content-Disposition: form-data; name=\"purpose\"\r\n"
    "\r\n"
    "batch\r\n"
    "------formdata-undici-0123456789\r\n"
    "Content-Disposition: form-data; name=\"file\"; "
    "filename=\"in.jsonl\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "{\"a\": 1}\r\n{\"b\": 2}\n"
    "\r\n"
    "------formdata-undici-0123456789--\r\n";

TEST(MultipartTest, TheSdksUploadParsesIntoItsFields) {
  auto parts = ParseMultipart(kContentType, kBody);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "purpose");
  EXPECT_EQ((*parts)[0].data, "batch");
  EXPECT_EQ((*parts)[0].filename, "");
  EXPECT_EQ((*parts)[1].name, "file");
  EXPECT_EQ((*parts)[1].filename, "in.jsonl");
  // The file's bytes as sent, its own line breaks included.
  EXPECT_EQ((*parts)[1].data, "{\"a\": 1}\r\n{\"b\": 2}\n");
}

TEST(MultipartTest, AQuotedBoundaryAndAnEmptyPartWork) {
  auto parts =
      ParseMultipart("multipart/form-data; boundary=\"xyz\"",
                     "--xyz\r\nContent-Disposition: form-data; name=\"file\"; "
                     "filename=\"e.jsonl\"\r\n\r\n\r\n--xyz--");
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ((*parts)[0].data, "");
}

// Collects what a MultipartReader hands on, as it hands it on.
class Recorder final : public FormVisitor {
 public:
  absl::Status PartStarts(const FormPartHead& head) override {
    events.push_back("start " + head.name);
    return absl::OkStatus();
  }
  absl::Status PartData(absl::string_view data) override {
    data_bytes += data.size();
    if (events.back().rfind("data", 0) != 0) events.push_back("data");
    events.back().append(data.data(), data.size());
    return absl::OkStatus();
  }
  absl::Status PartEnds() override {
    events.push_back("end");
    return absl::OkStatus();
  }
  std::vector<std::string> events;
  size_t data_bytes = 0;
};

TEST(MultipartTest, EveryWayOfCuttingTheBodyReadsTheSame) {
  const std::string body = kBody;
  for (size_t step = 1; step <= body.size(); ++step) {
    auto reader = MultipartReader::Create(kContentType);
    ASSERT_TRUE(reader.ok());
    Recorder recorder;
    for (size_t at = 0; at < body.size(); at += step) {
      ASSERT_TRUE(
          reader->Feed(absl::string_view(body).substr(at, step), recorder)
              .ok());
    }
    ASSERT_TRUE(reader->Finish().ok()) << step;
    EXPECT_THAT(recorder.events,
                ElementsAre("start purpose", "databatch", "end", "start file",
                            "data{\"a\": 1}\r\n{\"b\": 2}\n", "end"))
        << "cut every " << step << " bytes";
  }
}

TEST(MultipartTest, AFilePartIsHandedOnBeforeTheBodyEnds) {
  // 1 MB of a file part, its closing boundary not yet sent: every byte is
  // already handed on.
  auto reader = MultipartReader::Create(kContentType);
  ASSERT_TRUE(reader.ok());
  Recorder recorder;
  ASSERT_TRUE(reader
                  ->Feed("------formdata-undici-0123456789\r\n"
                         "Content-Disposition: form-data; name=\"file\"; "
                         "filename=\"big.jsonl\"\r\n\r\n",
                         recorder)
                  .ok());
  const std::string line = "{\"custom_id\": \"x\"}\n";
  size_t sent = 0;
  while (sent < (1 << 20)) {
    ASSERT_TRUE(reader->Feed(line, recorder).ok());
    sent += line.size();
  }
  // Nothing is held back: no end of it could begin the boundary.
  EXPECT_EQ(recorder.data_bytes, sent);
  // Bytes that could begin it wait for the next ones to say.
  ASSERT_TRUE(reader->Feed("\r\n--", recorder).ok());
  EXPECT_EQ(recorder.data_bytes, sent);
  ASSERT_TRUE(reader->Feed("x", recorder).ok());
  EXPECT_EQ(recorder.data_bytes, sent + 5);
  EXPECT_THAT(reader->Finish().message(),
              HasSubstr("a part does not end with the boundary"));
}

TEST(MultipartTest, WhatIsNotMultipartSaysWhatIsWrong) {
  EXPECT_THAT(ParseMultipart("application/json", "{}").status().message(),
              HasSubstr("send the file as multipart/form-data"));
  EXPECT_THAT(ParseMultipart("multipart/form-data", kBody).status().message(),
              HasSubstr("no boundary"));
  EXPECT_THAT(ParseMultipart(kContentType, "nothing").status().message(),
              HasSubstr("no boundary in it"));
  EXPECT_THAT(
      ParseMultipart(kContentType,
                     "------formdata-undici-0123456789\r\n"
                     "Content-Disposition: form-data; name=\"file\"\r\n\r\n"
                     "cut short")
          .status()
          .message(),
      HasSubstr("does not end with the boundary"));
  EXPECT_EQ(ParseMultipart(kContentType, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sdg
