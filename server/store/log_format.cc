#include "server/store/log_format.h"

#include <endian.h>
#include <zlib.h>

#include <cstring>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace sdg::log_format {
namespace {

constexpr size_t kHeaderSize = 16;
// A record larger than this is not one we wrote.
constexpr uint32_t kMaxPayload = 1u << 30;
// Set in a record's size word: the next record belongs to the same group.
constexpr uint32_t kGroupContinues = 1u << 31;

uint32_t RecordCrc(uint64_t sequence_le, absl::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(&sequence_le),
              sizeof(sequence_le));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data()),
              static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

struct Header {
  uint32_t size;
  uint32_t crc;
  uint64_t sequence_le;
  bool group_continues;
};

Header DecodeHeader(const char* bytes) {
  Header header;
  std::memcpy(&header.size, bytes, 4);
  std::memcpy(&header.crc, bytes + 4, 4);
  std::memcpy(&header.sequence_le, bytes + 8, 8);
  header.size = le32toh(header.size);
  header.group_continues = (header.size & kGroupContinues) != 0;
  header.size &= ~kGroupContinues;
  header.crc = le32toh(header.crc);
  return header;
}

}  // namespace

void AppendRecord(uint64_t sequence, absl::string_view payload,
                  bool group_continues, std::string& out) {
  const uint64_t sequence_le = htole64(sequence);
  const uint32_t size_le = htole32(static_cast<uint32_t>(payload.size()) |
                                   (group_continues ? kGroupContinues : 0));
  const uint32_t crc_le = htole32(RecordCrc(sequence_le, payload));
  out.append(reinterpret_cast<const char*>(&size_le), 4);
  out.append(reinterpret_cast<const char*>(&crc_le), 4);
  out.append(reinterpret_cast<const char*>(&sequence_le), 8);
  out.append(payload.data(), payload.size());
}

absl::StatusOr<std::optional<Record>> ReadRecord(int64_t offset, int64_t limit,
                                                 ReadFn read) {
  if (offset + static_cast<int64_t>(kHeaderSize) > limit) return std::nullopt;
  char header_bytes[kHeaderSize];
  absl::StatusOr<size_t> got = read(offset, kHeaderSize, header_bytes);
  if (!got.ok()) return got.status();
  if (*got != kHeaderSize) return std::nullopt;
  Header header = DecodeHeader(header_bytes);
  const int64_t end = offset + static_cast<int64_t>(kHeaderSize) + header.size;
  if (header.size > kMaxPayload || end > limit) return std::nullopt;
  std::string payload(header.size, '\0');
  got = read(offset + static_cast<int64_t>(kHeaderSize), header.size,
             payload.data());
  if (!got.ok()) return got.status();
  if (*got != header.size ||
      RecordCrc(header.sequence_le, payload) != header.crc) {
    return std::nullopt;
  }
  return Record{le64toh(header.sequence_le), std::move(payload), end,
                header.group_continues};
}

absl::StatusOr<WholeRecords> ScanWholeRecords(
    int64_t size, ReadFn read,
    absl::FunctionRef<void(const LogEvent&)> replay) {
  WholeRecords whole;
  std::vector<LogEvent> group;
  int64_t position = whole.end;
  while (true) {
    absl::StatusOr<std::optional<Record>> record =
        ReadRecord(position, size, read);
    if (!record.ok()) return record.status();
    const uint64_t expected = whole.last_sequence + group.size() + 1;
    LogEvent event;
    if (!record->has_value() || (*record)->sequence != expected ||
        !event.ParseFromString((*record)->payload) ||
        event.sequence() != expected) {
      return whole;
    }
    position = (*record)->end;
    group.push_back(std::move(event));
    if ((*record)->group_continues) continue;
    for (const LogEvent& grouped : group) replay(grouped);
    whole.last_sequence = group.back().sequence();
    whole.end = position;
    group.clear();
  }
}

LogEvent::EventCase EventCaseOf(absl::string_view payload) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream input(
      reinterpret_cast<const uint8_t*>(payload.data()),
      static_cast<int>(payload.size()));
  static const google::protobuf::OneofDescriptor* const kEvent =
      LogEvent::descriptor()->FindOneofByName("event");
  LogEvent::EventCase found = LogEvent::EVENT_NOT_SET;
  while (const uint32_t tag = input.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    for (int i = 0; i < kEvent->field_count(); ++i) {
      // A oneof case's value is its field's number.
      if (kEvent->field(i)->number() == field) {
        found = static_cast<LogEvent::EventCase>(field);
      }
    }
    if (!WireFormatLite::SkipField(&input, tag)) break;
  }
  return found;
}

}  // namespace sdg::log_format
