#include "client/ordered_output.h"

#include <algorithm>

#include "absl/status/status.h"

namespace sdg {

OrderedOutput::OrderedOutput(const std::vector<JsonRow>& inputs,
                             std::string output_column, int samples_per_row,
                             std::ostream& output, std::ostream& errors)
    : inputs_(&inputs),
      total_rows_(static_cast<int64_t>(inputs.size())),
      output_column_(std::move(output_column)),
      samples_per_row_(samples_per_row),
      output_(output),
      errors_(errors) {}

OrderedOutput::OrderedOutput(int64_t total_rows, std::string output_column,
                             int samples_per_row, std::ostream& output,
                             std::ostream& errors)
    : inputs_(nullptr),
      total_rows_(total_rows),
      output_column_(std::move(output_column)),
      samples_per_row_(samples_per_row),
      output_(output),
      errors_(errors) {}

void OrderedOutput::AddResult(const v1::ShardResult& result) {
  std::vector<const v1::ResultRow*> rows;
  for (const v1::ResultRow& row : result.rows()) rows.push_back(&row);
  std::sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) {
    return std::pair(a->row_index(), a->sample_index()) <
           std::pair(b->row_index(), b->sample_index());
  });
  for (const v1::ResultRow* row : rows) {
    int64_t index = row->row_index();
    if (index < next_row_ || index >= total_rows_) {
      continue;  // not a row of ours, or already written
    }
    JsonRow line;
    if (inputs_ != nullptr) {
      // The input row as read (its key order and numbers intact), plus what
      // the server added.
      line = (*inputs_)[index];
      for (const auto& [key, value] : row->columns().fields()) {
        if (key == output_column_ || !line.contains(key)) {
          line[key] = ValueToJson(value);
        }
      }
    } else {
      std::map<std::string, const google::protobuf::Value*> sorted;
      for (const auto& [key, value] : row->columns().fields()) {
        sorted[key] = &value;
      }
      line = JsonRow::object();
      for (const auto& [key, value] : sorted) line[key] = ValueToJson(*value);
    }
    done_[index].push_back(std::move(line));
  }
  Flush();
}

void OrderedOutput::AddError(const v1::ShardError& error) {
  for (int64_t i = 0; i < error.row_count(); ++i) {
    failed_[error.first_row() + i] = Failure{error.code(), error.message()};
  }
  Flush();
}

void OrderedOutput::Flush() {
  while (next_row_ < total_rows_ && WriteRow(next_row_)) ++next_row_;
}

bool OrderedOutput::WriteRow(int64_t row_index) {
  if (auto done = done_.find(row_index);
      done != done_.end() &&
      static_cast<int>(done->second.size()) >= samples_per_row_) {
    for (const JsonRow& line : done->second) {
      output_ << line.dump(-1, ' ', false, JsonRow::error_handler_t::replace)
              << '\n';
      ++lines_written_;
    }
    done_.erase(done);
    return true;
  }
  if (auto failed = failed_.find(row_index); failed != failed_.end()) {
    WriteError(row_index, failed->second.code, failed->second.message);
    failed_.erase(failed);
    return true;
  }
  return false;
}

void OrderedOutput::WriteError(int64_t row_index, int32_t code,
                               const std::string& message) {
  JsonRow line;
  line["row_index"] = row_index;
  line["code"] = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  line["message"] = message;
  if (inputs_ != nullptr) line["row"] = (*inputs_)[row_index];
  errors_ << line.dump(-1, ' ', false, JsonRow::error_handler_t::replace)
          << '\n';
  ++rows_failed_;
}

void OrderedOutput::FinishMissing(const std::string& reason) {
  Flush();
  for (; next_row_ < total_rows_; ++next_row_) {
    // A row with some samples but not all counts as not generated.
    if (!WriteRow(next_row_)) {
      WriteError(next_row_, static_cast<int32_t>(absl::StatusCode::kAborted),
                 reason);
    }
  }
  done_.clear();
}

int64_t OrderedOutput::FinishPartial() {
  Flush();
  int64_t left_out = 0;
  for (; next_row_ < total_rows_; ++next_row_) {
    // A row with some samples but not all is not generated yet either.
    if (!WriteRow(next_row_)) ++left_out;
  }
  done_.clear();
  return left_out;
}

}  // namespace sdg
