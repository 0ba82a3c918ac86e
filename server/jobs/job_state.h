// A job's state as its record holds it, and the transitions between its
// states. Pure: no lock, no I/O, no clock (times are passed in). A Job
// holds one under its mutex and saves record() once that is released.
#ifndef SDG_SERVER_JOBS_JOB_STATE_H_
#define SDG_SERVER_JOBS_JOB_STATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job_tally.h"
#include "server/store/job_store.h"

namespace sdg {

// What a job ends as, and why ("" when it succeeded).
struct JobEnd {
  v1::JobState state = v1::JOB_STATE_SUCCEEDED;
  std::string reason;
};
// What a job runs: a block, a pipeline, or an OpenAI batch's lines.
enum class JobKind { kBlock, kPipeline, kOpenAiBatch };
// A job stopped early (`stop_reason` not OK) is cancelled (CANCELLED) or
// failed (any other code: failed fast, out of time); one that ran to its
// end failed if any of its shards did, except an OpenAI batch, which is
// then complete (its failed lines are in its error file). `total_rows` and
// `total_shards` are the seed rows and the shards cut, for the reason's
// figures.
JobEnd EndOf(const absl::Status& stop_reason, const JobTally& tally,
             JobKind kind, int64_t total_rows, int64_t total_shards);

class JobState {
 public:
  // What describes an ended job besides its final event.
  struct Totals {
    int64_t total_rows = 0;
    int64_t total_shards = 0;
    uint64_t last_sequence = 0;
  };

  // `now` stands in for a create time the record lacks.
  JobState(JobRecord record, absl::Time now);

  const JobRecord& record() const { return record_; }
  v1::JobState state() const { return record_.state; }
  // Suspended in memory: the stored state stays QUEUED or RUNNING, so the
  // job resumes when sdgd starts again, and its record is not saved.
  bool suspended() const { return record_.state == v1::JOB_STATE_SUSPENDED; }

  // The log holds `finished` but the record was saved before it (a crash
  // came between): the record takes the log's end. True if it changed, and
  // must be saved.
  bool RepairFromLog(const std::optional<v1::JobFinished>& logged,
                     const Totals& totals, absl::Time now);
  // RUNNING; the first run sets the start time.
  void Run(absl::Time now);
  void Suspend(absl::string_view reason);
  // The final state, as the job's `finished` event says.
  void Finish(const v1::JobFinished& finished, const Totals& totals,
              absl::Time end);
  // `finished` never reached the log: the job is suspended instead, and
  // finishes from its log when sdgd starts again.
  void FinishNotCommitted(absl::string_view reason);
  // The store now holds the record at `version`: the next save must find
  // it there (JobRecordStore::UpdateJob).
  void Saved(int64_t version) { record_.version = version; }

 private:
  JobRecord record_;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_STATE_H_
