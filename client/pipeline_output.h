// Writes a pipeline job's results in the order InstructLab's block-by-block
// run gives: every result row carries its order key, and the rows are
// written sorted by it once the job has ended (a later shard's row may come
// first: a flatten step is variable-major). Failed rows go to the errors
// file the same way, each with its seed row and the step it failed at.
#ifndef SDG_CLIENT_PIPELINE_OUTPUT_H_
#define SDG_CLIENT_PIPELINE_OUTPUT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "client/row_json.h"
#include "sdg/v1/generation.pb.h"

namespace sdg {

class PipelineOutput {
 public:
  PipelineOutput(std::ostream& output, std::ostream& errors)
      : output_(output), errors_(errors) {}

  void AddResult(const v1::ShardResult& result);
  void AddError(const v1::ShardError& error);
  // Writes both files. Call once, at the end.
  void Finish();

  int64_t lines_written() const { return lines_written_; }
  int64_t rows_failed() const { return rows_failed_; }

 private:
  struct Line {
    std::vector<int64_t> order_key;
    std::string text;
  };
  static void WriteSorted(std::vector<Line>& lines, std::ostream& out);

  std::ostream& output_;
  std::ostream& errors_;
  std::vector<Line> rows_;
  std::vector<Line> errors_seen_;
  int64_t lines_written_ = 0;
  int64_t rows_failed_ = 0;
};

}  // namespace sdg

#endif  // SDG_CLIENT_PIPELINE_OUTPUT_H_
