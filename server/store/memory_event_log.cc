#include "server/store/memory_event_log.h"

namespace sdg {

class MemoryEventLog::MemoryReader final : public EventLog::Reader {
 public:
  MemoryReader(std::shared_ptr<MemoryEventLog> log, uint64_t after)
      : log_(std::move(log)), last_read_(after) {}

  absl::StatusOr<std::optional<EncodedEvent>> Next() override {
    absl::MutexLock lock(&log_->mu_);
    if (last_read_ >= log_->events_.size()) return std::nullopt;
    // events_[i] holds sequence i + 1: the next one is at last_read_.
    return log_->events_[last_read_++];
  }
  std::optional<absl::Status> End() const override {
    return log_->EndFor(last_read_);
  }
  uint64_t last_read() const override { return last_read_; }
  EventLog& log() const override { return *log_; }

 private:
  const std::shared_ptr<MemoryEventLog> log_;
  uint64_t last_read_;
};

std::shared_ptr<EventLog> MemoryEventLog::Create() {
  return std::shared_ptr<MemoryEventLog>(new MemoryEventLog());
}

uint64_t MemoryEventLog::AppendGroup(absl::Span<LogEvent> group) {
  LogProgress::Callbacks waiters;
  uint64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    for (LogEvent& event : group) {
      sequence = progress_.Append();
      event.set_sequence(sequence);
      events_.push_back(
          {sequence, event.event_case(), event.SerializeAsString()});
    }
    waiters = progress_.Committed(sequence);
  }
  for (auto& waiter : waiters) waiter();
  return sequence;
}

absl::StatusOr<std::unique_ptr<EventLog::Reader>> MemoryEventLog::Read(
    uint64_t after_sequence) {
  return std::make_unique<MemoryReader>(shared_from_this(), after_sequence);
}

}  // namespace sdg
