// Requests decoded from their bytes: inline rows stay serialized, the other
// fields are parsed, and bytes that are not the message are refused.
#include "server/api/wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Bytes(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(DecodeGenerateJobRequestTest, RowsStaySerializedAndTheRestIsParsed) {
  v1::GenerateJobRequest request;
  request.set_job_id("j");
  request.mutable_block()->set_model("m");
  request.set_batch_size(4);
  for (const char* text : {"a", "b"}) {
    (*request.add_rows()->mutable_fields())["q"].set_string_value(text);
  }
  DecodedJobRequest decoded;
  ASSERT_TRUE(
      DecodeGenerateJobRequest(Bytes(request.SerializeAsString()), decoded)
          .ok());
  EXPECT_EQ(decoded.fields.job_id(), "j");
  EXPECT_EQ(decoded.fields.block().model(), "m");
  EXPECT_EQ(decoded.fields.batch_size(), 4);
  EXPECT_EQ(decoded.fields.rows_size(), 0);
  ASSERT_EQ(decoded.rows.size(), 2u);
  google::protobuf::Struct row;
  ASSERT_TRUE(row.ParseFromArray(decoded.rows[1].data(),
                                 static_cast<int>(decoded.rows[1].size())));
  EXPECT_EQ(row.fields().at("q").string_value(), "b");
}

TEST(DecodeGenerateJobRequestTest, RowsSpanningSlicesAreWhole) {
  v1::GenerateJobRequest request;
  request.set_job_id("split");
  for (int i = 0; i < 50; ++i) {
    (*request.add_rows()->mutable_fields())["q"].set_string_value(
        "row " + std::to_string(i));
  }
  // gRPC hands a large message over as many slices: here of 7 bytes.
  const std::string bytes = request.SerializeAsString();
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += 7) {
    slices.emplace_back(bytes.substr(at, 7));
  }
  DecodedJobRequest decoded;
  ASSERT_TRUE(DecodeGenerateJobRequest(
                  grpc::ByteBuffer(slices.data(), slices.size()), decoded)
                  .ok());
  EXPECT_EQ(decoded.fields.job_id(), "split");
  ASSERT_EQ(decoded.rows.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    google::protobuf::Struct row;
    ASSERT_TRUE(row.ParseFromArray(decoded.rows[i].data(),
                                   static_cast<int>(decoded.rows[i].size())));
    EXPECT_EQ(row.fields().at("q").string_value(), "row " + std::to_string(i));
  }
}

TEST(DecodeGenerateJobRequestTest, BytesThatAreNotTheMessageAreRefused) {
  DecodedJobRequest decoded;
  // A length-delimited field (rows) claiming more bytes than there are.
  absl::Status status =
      DecodeGenerateJobRequest(Bytes(std::string("\x12\x7f\x01", 3)), decoded);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("the GenerateJobRequest could not be decoded"));
  EXPECT_TRUE(decoded.rows.empty());
  // An empty request is a request with every field at its default.
  EXPECT_TRUE(DecodeGenerateJobRequest(grpc::ByteBuffer(), decoded).ok());
}

TEST(DecodeRequestTest, NamesTheMessageThatDidNotDecode) {
  v1::GetJobRequest request;
  absl::Status status =
      DecodeRequest(Bytes(std::string("\x0a\x02\xff\xfe", 4)), request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("the GetJobRequest could not be decoded"));
}

}  // namespace
}  // namespace sdg
