// Where a job's events go: the caller's gRPC stream today, a file later.
#ifndef SDG_SERVER_JOB_SINK_H_
#define SDG_SERVER_JOB_SINK_H_

#include "sdg/v1/generation.pb.h"

namespace sdg {

class JobSink {
 public:
  virtual ~JobSink() = default;
  // Events arrive in order, one call at a time; never blocks.
  virtual void Emit(v1::JobEvent event) = 0;
  // The job has emitted its last event (`finished`).
  virtual void Close() = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOB_SINK_H_
