// A batch's output and error files (purpose "batch_output"), written in
// input order from its job's committed events: each answered line to the
// output file, each failed line to the error file, and once the job has
// ended the lines no event answered (the batch was cancelled, or expired)
// to the error file, so that output plus error lines equal the input lines.
//
// BatchFiles reads the job's log as it grows: BatchService runs one beside
// each batch it creates, which takes each shard's lines as they commit, so
// the files are stored moments after the job's `finished` event; a batch
// that ran in an earlier process gets one once it has ended, which reads
// its whole log at once.

#ifndef SDG_SERVER_SERVICE_BATCH_FILES_H_
#define SDG_SERVER_SERVICE_BATCH_FILES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/dataset.h"
#include "server/store/event_log.h"
#include "server/store/job_store.h"

namespace sdg {

class OutputFile;

class BatchFiles {
 public:
  struct Batch {
    std::string job_id;
    std::string tenant;
    // The batch's output_expires_after (0: the files live as any file).
    int64_t output_expires_after_seconds = 0;
  };
  // Lines that commit before a line above them wait in memory, up to this
  // many bytes; past it, the furthest ahead are let go and read from the
  // log again once the lines above them are written.
  static constexpr size_t kMaxWaitingBytes = 64 << 20;

  // The files of `batch`, whose lines are `input`, from `log`'s first
  // event. What an earlier attempt left unsaved is discarded.
  static absl::StatusOr<std::unique_ptr<BatchFiles>> Open(
      DatasetStore& store, Batch batch, std::shared_ptr<Dataset> input,
      const std::shared_ptr<EventLog>& log,
      size_t max_waiting_bytes = kMaxWaitingBytes);
  // Files not saved are discarded.
  ~BatchFiles();

  // The ids of the output and error files of the batch job `job_id`.
  static std::string OutputFileId(absl::string_view job_id);
  static std::string ErrorFileId(absl::string_view job_id);
  // A job that its completion window stopped (JobTimeout's reason).
  static bool ExpiredByWindow(v1::JobState state, absl::string_view reason);

  BatchFiles(const BatchFiles&) = delete;
  BatchFiles& operator=(const BatchFiles&) = delete;

  enum class Progress {
    kFollowing,  // every committed event is taken; more will come
    kSaved,      // the job's `finished` event was read: both files stored
    kNone,       // the log ended without files to write: the job was
                 // suspended, or its lines failed validation
  };
  // Takes every event committed since the last call. An error (reading the
  // log, writing a file) is final: the files are discarded, and later
  // calls return it.
  absl::StatusOr<Progress> CatchUp();

  // The log's last event taken.
  uint64_t last_read() const { return reader_->last_read(); }
  EventLog& log() const { return reader_->log(); }
  // The bytes of the lines waiting for a line above them.
  size_t waiting_bytes() const { return waiting_bytes_; }
  // How many times the log was read again for lines let go.
  int log_passes() const { return passes_; }

 private:
  struct Line {
    bool succeeded = false;
    std::string text;
  };

  BatchFiles(DatasetStore& store, Batch batch, std::shared_ptr<Dataset> input,
             std::unique_ptr<EventLog::Reader> reader,
             size_t max_waiting_bytes);
  absl::Status Take(const EventLog::EncodedEvent& encoded);
  absl::Status TakeRows(const LogEvent& event);
  // Marks `row` answered; false if it is written already (or no line).
  bool Answered(int64_t row);
  // Line `row`: written at once when it is the next, else it waits (or is
  // let go, past max_waiting_bytes_).
  absl::Status Place(int64_t row, Line line);
  // The waiting lines that are next.
  absl::Status WriteWaiting();
  // Once `finished_` is read: every line in order (the log read again for
  // those let go), those no event answered to the error file; then both
  // files stored.
  absl::Status Complete();
  absl::Status Write(const Line& line);
  absl::StatusOr<std::string> CustomIdAt(int64_t row) const;
  // Removes what is written of the files.
  void Discard();

  DatasetStore& store_;
  const Batch batch_;
  const std::shared_ptr<Dataset> input_;
  const size_t max_waiting_bytes_;
  const std::unique_ptr<EventLog::Reader> reader_;
  std::unique_ptr<OutputFile> output_;
  std::unique_ptr<OutputFile> errors_;
  // Lines that came before a line above them. Shards commit near their
  // order (a worker's few at a time; after a restart, those in flight),
  // but one slow request holds back every line after it.
  std::map<int64_t, Line> waiting_;
  size_t waiting_bytes_ = 0;
  // The rows an event answered: one bit a line.
  std::vector<bool> answered_;
  int64_t next_row_ = 0;  // the first line not written
  std::optional<v1::JobFinished> finished_;
  int passes_ = 0;
  bool saved_ = false;
  absl::Status error_;  // the first that stopped it
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_BATCH_FILES_H_
