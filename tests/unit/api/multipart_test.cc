#include "server/api/multipart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

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
