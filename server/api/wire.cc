#include "server/api/wire.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

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

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

constexpr int kWireVarint = 0, kWireFixed64 = 1, kWireLength = 2,
              kWireFixed32 = 5;

// Reads the rows of a serialized GenerateJobRequest (field 2) as views into
// the stream's buffers where they lie in one, and copies the other fields,
// as they are, into `others`. False if the bytes are not a well-formed
// protobuf message.
bool SplitRows(CodedInputStream& input, DecodedJobRequest& request,
               CodedOutputStream& others) {
  while (true) {
    const uint32_t tag = input.ReadTag();
    if (tag == 0) return input.ConsumedEntireMessage();
    const int wire_type = static_cast<int>(tag & 7);
    if (wire_type == kWireLength) {
      uint32_t length;
      if (!input.ReadVarint32(&length)) return false;
      if ((tag >> 3) == v1::GenerateJobRequest::kRowsFieldNumber) {
        const void* data;
        int size;
        if (input.GetDirectBufferPointer(&data, &size) &&
            static_cast<uint32_t>(size) >= length) {
          request.rows.emplace_back(static_cast<const char*>(data), length);
          if (!input.Skip(static_cast<int>(length))) return false;
        } else {
          std::string& row = request.spanning.emplace_back();
          if (!input.ReadString(&row, static_cast<int>(length))) return false;
          request.rows.emplace_back(row);
        }
        continue;
      }
      std::string value;
      if (!input.ReadString(&value, static_cast<int>(length))) return false;
      others.WriteTag(tag);
      others.WriteVarint32(length);
      others.WriteString(value);
    } else if (wire_type == kWireVarint) {
      uint64_t value;
      if (!input.ReadVarint64(&value)) return false;
      others.WriteTag(tag);
      others.WriteVarint64(value);
    } else if (wire_type == kWireFixed64) {
      uint64_t value;
      if (!input.ReadLittleEndian64(&value)) return false;
      others.WriteTag(tag);
      others.WriteLittleEndian64(value);
    } else if (wire_type == kWireFixed32) {
      uint32_t value;
      if (!input.ReadLittleEndian32(&value)) return false;
      others.WriteTag(tag);
      others.WriteLittleEndian32(value);
    } else {
      return false;  // groups: not in a proto3 message
    }
  }
}

}  // namespace

absl::Status DecodeGenerateJobRequest(const grpc::ByteBuffer& bytes,
                                      DecodedJobRequest& request) {
  request.fields.Clear();
  request.rows.clear();
  request.spanning.clear();
  request.bytes = bytes;  // shares the slices the rows will point into
  if (!bytes.Valid() || bytes.Length() == 0) return absl::OkStatus();
  grpc::ProtoBufferReader reader(&request.bytes);
  std::string others;
  bool split;
  {
    CodedInputStream input(&reader);
    input.SetTotalBytesLimit(std::numeric_limits<int>::max());
    google::protobuf::io::StringOutputStream sink(&others);
    CodedOutputStream out(&sink);
    split = reader.status().ok() && SplitRows(input, request, out);
  }
  if (split && request.fields.ParseFromString(others)) {
    return absl::OkStatus();
  }
  request.rows.clear();
  request.spanning.clear();
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
