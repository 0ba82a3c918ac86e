// The durable store's record reader: a job's event log file with any
// contents is opened as on a restart (whole records replayed, a torn tail
// cut off), then read back as a watcher reads it.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "server/store/event_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sdg::LogCommitter* committer = new sdg::LogCommitter();
  static const std::string path =
      "/tmp/sdg-event-log-fuzz-" + std::to_string(::getpid()) + ".log";
  std::ofstream(path, std::ios::trunc | std::ios::binary)
      .write(reinterpret_cast<const char*>(data),
             static_cast<std::streamsize>(size));
  int replayed = 0;
  absl::StatusOr<std::shared_ptr<sdg::EventLog>> log = sdg::EventLog::OpenFile(
      path, *committer, [&replayed](const sdg::v1::JobEvent&) { ++replayed; });
  if (!log.ok()) return 0;
  absl::StatusOr<std::unique_ptr<sdg::EventLog::Reader>> reader =
      (*log)->Read(0);
  if (!reader.ok()) return 0;
  for (int read = 0; read <= replayed; ++read) {
    auto next = (*reader)->Next();
    if (!next.ok() || !next->has_value()) break;
  }
  return 0;
}
