// The event log's record format, pure: framing, CRC and the scan that finds
// where a log's whole groups end. No I/O: bytes come through a ReadFn, so
// the same code reads a file, a buffer or a fuzzer's input.
//
//   "SDGLOG1\n", then per event a record:
//   u32 payload size, u32 CRC-32 of (sequence, payload), u64 sequence,
//   payload (a serialized sdg.store.v1.LogEvent); little-endian. The size
//   word's top bit says the next record belongs to the same group: a group (a
//   shard's results and errors) is committed, replayed and cut whole.
#ifndef SDG_SERVER_STORE_LOG_FORMAT_H_
#define SDG_SERVER_STORE_LOG_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/log_event.h"

namespace sdg::log_format {

inline constexpr absl::string_view kMagic = "SDGLOG1\n";

// Copies up to `size` bytes at `offset` into `out`; fewer only at the end.
using ReadFn = absl::FunctionRef<absl::StatusOr<size_t>(
    int64_t offset, size_t size, char* out)>;

// Appends one record to `out`.
void AppendRecord(uint64_t sequence, absl::string_view payload,
                  bool group_continues, std::string& out);

struct Record {
  uint64_t sequence = 0;
  std::string payload;  // a serialized sdg.store.v1.LogEvent, its CRC checked
  int64_t end = 0;      // the offset after it
  bool group_continues = false;
};
// The record at `offset`, reading no further than `limit`; nullopt for a
// torn or damaged record (short, oversized, bad CRC).
absl::StatusOr<std::optional<Record>> ReadRecord(int64_t offset, int64_t limit,
                                                 ReadFn read);

// Where the whole groups of a log of `size` bytes end: reads every record
// in sequence from the first, handing each group's events to `replay` once
// the group is whole, and stops at the first record that is torn, damaged
// or out of sequence (the records of its group before it are left out).
// The caller has checked the magic.
struct WholeRecords {
  int64_t end = static_cast<int64_t>(kMagic.size());
  uint64_t last_sequence = 0;
};
absl::StatusOr<WholeRecords> ScanWholeRecords(
    int64_t size, ReadFn read, absl::FunctionRef<void(const LogEvent&)> replay);

// The oneof case of a serialized LogEvent, from its top-level field tags,
// without parsing it; EVENT_NOT_SET if it has none or the bytes do not
// parse that far.
LogEvent::EventCase EventCaseOf(absl::string_view payload);

}  // namespace sdg::log_format

#endif  // SDG_SERVER_STORE_LOG_FORMAT_H_
