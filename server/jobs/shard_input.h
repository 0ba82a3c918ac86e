// What one shard runs on, as the Job reads it: a block's rows from the
// job's dataset, or a pipeline stage's input rows.
#ifndef SDG_SERVER_JOBS_SHARD_INPUT_H_
#define SDG_SERVER_JOBS_SHARD_INPUT_H_

#include <variant>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "server/pipeline/pipeline_rows.h"

namespace sdg {

// A pipeline shard's rows: seed rows for the first stage, rows released
// through the barrier before `stage` for a later one.
struct StageInput {
  int stage = 0;
  std::vector<PipelineRow> rows;
};

// A block's shard: its rows of the dataset.
using BlockInput = std::vector<google::protobuf::Struct>;

using ShardInput = std::variant<BlockInput, StageInput>;

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SHARD_INPUT_H_
