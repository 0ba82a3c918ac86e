// The event log's record format (log_format.h), on any bytes: the scan a
// restart runs (whole groups replayed, where the torn tail starts), then
// the records read back one by one as a watcher reads them. What the scan
// calls whole must read back whole, in sequence.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "server/store/log_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace log_format = sdg::log_format;
  const int64_t length = static_cast<int64_t>(size);
  auto read = [&](int64_t offset, size_t n,
                  char* out) -> absl::StatusOr<size_t> {
    if (offset >= length) return 0;
    const size_t got = std::min(n, static_cast<size_t>(length - offset));
    std::memcpy(out, data + offset, got);
    return got;
  };
  if (size < log_format::kMagic.size()) return 0;
  uint64_t replayed = 0;
  absl::StatusOr<log_format::WholeRecords> whole = log_format::ScanWholeRecords(
      length, read, [&replayed](const sdg::LogEvent&) { ++replayed; });
  if (!whole.ok() || whole->end > length || whole->last_sequence != replayed) {
    std::abort();
  }
  int64_t position = static_cast<int64_t>(log_format::kMagic.size());
  for (uint64_t sequence = 1; position < whole->end; ++sequence) {
    auto record = log_format::ReadRecord(position, whole->end, read);
    if (!record.ok() || !record->has_value() ||
        (*record)->sequence != sequence) {
      std::abort();  // the scan called it whole
    }
    (void)log_format::EventCaseOf((*record)->payload);
    position = (*record)->end;
  }
  if (position != whole->end) std::abort();
  return 0;
}
