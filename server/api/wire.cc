#include "server/api/wire.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace sdg {

absl::Status DecodeRequest(const grpc::ByteBuffer& bytes,
                           google::protobuf::Message& message) {
  message.Clear();
  if (!bytes.Valid() || bytes.Length() == 0) return absl::OkStatus();
  grpc::ByteBuffer copy(bytes);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  if (reader.status().ok() && message.ParseFromZeroCopyStream(&reader)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", message.GetDescriptor()->name(),
      " could not be decoded: the bytes are not a valid ",
      message.GetDescriptor()->full_name(),
      " (is a string field not UTF-8, or are Struct values nested deeper "
      "than 100 levels?)"));
}

namespace {

// Splits a serialized GenerateJobRequest into its rows (field 2, kept as
// views) and its other fields (copied into `others`). False if the bytes
// are not a well-formed protobuf message.
bool SplitRows(absl::string_view bytes, std::vector<absl::string_view>& rows,
               std::string& others) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream input(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  input.SetTotalBytesLimit(std::numeric_limits<int>::max());
  while (true) {
    const int start = input.CurrentPosition();
    const uint32_t tag = input.ReadTag();
    if (tag == 0) return input.ConsumedEntireMessage();
    uint32_t length = 0;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t value;
        if (!input.ReadVarint64(&value)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64:
        if (!input.Skip(8)) return false;
        break;
      case WireFormatLite::WIRETYPE_FIXED32:
        if (!input.Skip(4)) return false;
        break;
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        if (!input.ReadVarint32(&length)) return false;
        const int data = input.CurrentPosition();
        if (!input.Skip(static_cast<int>(length))) return false;
        if (WireFormatLite::GetTagFieldNumber(tag) ==
            v1::GenerateJobRequest::kRowsFieldNumber) {
          rows.push_back(bytes.substr(data, length));
          continue;
        }
        break;
      }
      default:  // groups: not in a proto3 message
        return false;
    }
    absl::StrAppend(&others,
                    bytes.substr(start, input.CurrentPosition() - start));
  }
}

}  // namespace

absl::Status DecodeGenerateJobRequest(const grpc::ByteBuffer& bytes,
                                      DecodedJobRequest& request) {
  request.fields.Clear();
  request.rows.clear();
  request.bytes = grpc::Slice();
  if (!bytes.Valid() || bytes.Length() == 0) return absl::OkStatus();
  // One slice: shared, not copied, when gRPC received the message whole.
  if (!bytes.DumpToSingleSlice(&request.bytes).ok()) {
    return absl::InternalError("the request's bytes could not be read");
  }
  const absl::string_view view(
      reinterpret_cast<const char*>(request.bytes.begin()),
      request.bytes.size());
  std::string others;
  if (SplitRows(view, request.rows, others) &&
      request.fields.ParseFromString(others)) {
    return absl::OkStatus();
  }
  request.rows.clear();
  return absl::InvalidArgumentError(
      "the GenerateJobRequest could not be decoded: the bytes are not a valid "
      "sdg.v1.GenerateJobRequest (is a string field not UTF-8?)");
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  // What gRPC's generated code does for a typed message.
  (void)grpc::GenericSerialize<grpc::ProtoBufferWriter,
                               google::protobuf::Message>(message, &buffer,
                                                          &own_buffer);
  return buffer;
}

}  // namespace sdg
