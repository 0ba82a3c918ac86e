// The --ephemeral store's event log: events are committed as soon as they
// are appended and kept, serialized, in memory until the log goes.
#ifndef SDG_SERVER_STORE_MEMORY_EVENT_LOG_H_
#define SDG_SERVER_STORE_MEMORY_EVENT_LOG_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/store/event_log.h"
#include "server/store/log_event.h"

namespace sdg {

class MemoryEventLog final
    : public CommittedLog,
      public std::enable_shared_from_this<MemoryEventLog> {
 public:
  static std::shared_ptr<EventLog> Create();

  // Committed on append: nothing waits, and committing does not fail.
  uint64_t AppendGroup(absl::Span<LogEvent> group) override;
  void AwaitRoom() override {}
  absl::StatusOr<std::unique_ptr<Reader>> Read(
      uint64_t after_sequence) override;

 private:
  class MemoryReader;
  MemoryEventLog() = default;

  std::vector<EncodedEvent> events_ ABSL_GUARDED_BY(mu_);  // events_[i]: i + 1
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_MEMORY_EVENT_LOG_H_
