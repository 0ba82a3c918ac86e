// The --ephemeral store's event log: events are committed as soon as they
// are appended and kept, serialized, in memory until the log goes.
#ifndef SDG_SERVER_STORE_MEMORY_EVENT_LOG_H_
#define SDG_SERVER_STORE_MEMORY_EVENT_LOG_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/store/event_log.h"

namespace sdg {

class MemoryEventLog final
    : public EventLog,
      public std::enable_shared_from_this<MemoryEventLog> {
 public:
  static std::shared_ptr<EventLog> Create();

  uint64_t AppendGroup(absl::Span<v1::JobEvent> group) override;
  void AwaitRoom() override {}       // nothing waits to be committed
  void AwaitCommitted() override {}  // committed on append
  // Committing to memory does not fail.
  void SetOnCommitError(std::function<void(absl::Status)>) override {}
  void End(absl::Status status) override;
  uint64_t last_sequence() const override;
  absl::Status commit_error() const override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Reader>> Read(
      uint64_t after_sequence) override;
  bool NotifyAfter(uint64_t sequence, std::function<void()> callback) override;

 private:
  class MemoryReader;
  MemoryEventLog() = default;

  mutable absl::Mutex mu_;
  std::vector<EncodedEvent> events_ ABSL_GUARDED_BY(mu_);  // events_[i]: i + 1
  LogProgress progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_MEMORY_EVENT_LOG_H_
