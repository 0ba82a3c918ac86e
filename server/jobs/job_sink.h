// Where a job's events go: the caller's gRPC stream today, a file later.
#ifndef SDG_SERVER_JOBS_JOB_SINK_H_
#define SDG_SERVER_JOBS_JOB_SINK_H_

#include <functional>

#include "sdg/v1/generation.pb.h"

namespace sdg {

class JobSink {
 public:
  virtual ~JobSink() = default;
  // Events arrive in order, one call at a time; never blocks.
  virtual void Emit(v1::JobEvent event) = 0;
  // The job has emitted its last event (`finished`).
  virtual void Close() = 0;
  // False while the consumer is behind; the scheduler then starts no new
  // shard of the job. Emit still accepts the events of shards in progress,
  // so a sink holds at most its limit plus one event per running shard.
  virtual bool HasRoom() const { return true; }
  // `callback` runs (on any thread, with no lock held) each time HasRoom
  // turns true again.
  virtual void SetOnRoom(std::function<void()> callback) {}
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_SINK_H_
