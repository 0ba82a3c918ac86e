// Writes a job's results in input order, however the server streamed them:
// each input row's lines (n per row, in sample order) go to the output file,
// each failed row to the errors file, as soon as every row before it is done.
#ifndef SDG_CLIENT_ORDERED_OUTPUT_H_
#define SDG_CLIENT_ORDERED_OUTPUT_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "client/row_json.h"
#include "sdg/v1/generation.pb.h"

namespace sdg {

class OrderedOutput {
 public:
  // `inputs` are the rows as read; `output_column` is the block's.
  OrderedOutput(const std::vector<JsonRow>& inputs, std::string output_column,
                int samples_per_row, std::ostream& output,
                std::ostream& errors);
  // Without the input file (`sdgctl output`): lines are the columns the
  // server sent, keys sorted, and error lines carry no input row.
  OrderedOutput(int64_t total_rows, std::string output_column,
                int samples_per_row, std::ostream& output,
                std::ostream& errors);

  void AddResult(const v1::ShardResult& result);
  void AddError(const v1::ShardError& error);
  // The job ended: rows with no result and no error (a cancelled job) go to
  // the errors file with `reason`. Call once, at the end.
  void FinishMissing(const std::string& reason);
  // The job has not ended (sdgctl stopped following it): every row that
  // came back, result or error, is written in input order and the rows not
  // yet generated are left out of both files: they have not failed. Call
  // once, at the end. Returns how many rows were left out.
  int64_t FinishPartial();

  int64_t lines_written() const { return lines_written_; }
  int64_t rows_failed() const { return rows_failed_; }

 private:
  struct Failure {
    int32_t code;
    std::string message;
  };
  void Flush();
  // Writes row `row_index` to its file if it is done or failed; false if
  // it is neither (not yet generated).
  bool WriteRow(int64_t row_index);
  void WriteError(int64_t row_index, int32_t code, const std::string& message);

  const std::vector<JsonRow>* const inputs_;  // null: not known
  const int64_t total_rows_;
  const std::string output_column_;
  const int samples_per_row_;
  std::ostream& output_;
  std::ostream& errors_;

  int64_t next_row_ = 0;
  std::map<int64_t, std::vector<JsonRow>> done_;  // row -> its output lines
  std::map<int64_t, Failure> failed_;
  int64_t lines_written_ = 0;
  int64_t rows_failed_ = 0;
};

}  // namespace sdg

#endif  // SDG_CLIENT_ORDERED_OUTPUT_H_
