#include "client/pipeline_output.h"

#include <algorithm>

#include "absl/status/status.h"

namespace sdg {
namespace {

std::string Dump(const JsonRow& json) {
  return json.dump(-1, ' ', false, JsonRow::error_handler_t::replace);
}

}  // namespace

void PipelineOutput::AddResult(const v1::ShardResult& result) {
  for (const v1::ResultRow& row : result.rows()) {
    // Struct fields have no order: keys sorted, so equal rows print equal.
    std::vector<const std::string*> keys;
    for (const auto& field : row.columns().fields())
      keys.push_back(&field.first);
    std::sort(
        keys.begin(), keys.end(),
        [](const std::string* a, const std::string* b) { return *a < *b; });
    JsonRow object = JsonRow::object();
    for (const std::string* key : keys) {
      object[*key] = ValueToJson(row.columns().fields().at(*key));
    }
    rows_.push_back(
        Line{{row.order_key().begin(), row.order_key().end()}, Dump(object)});
  }
}

void PipelineOutput::AddError(const v1::ShardError& error) {
  JsonRow line;
  line["row_index"] = error.first_row();
  if (error.row_count() > 1) line["row_count"] = error.row_count();
  line["step"] = error.step();
  line["code"] =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(error.code()));
  line["message"] = error.message();
  // A stopped shard's error has no order key: it sorts by its seed row.
  std::vector<int64_t> key(error.order_key().begin(), error.order_key().end());
  if (key.empty()) key.push_back(error.first_row());
  errors_seen_.push_back(Line{std::move(key), Dump(line)});
  rows_failed_ += error.row_count();
}

void PipelineOutput::WriteSorted(std::vector<Line>& lines, std::ostream& out) {
  std::stable_sort(
      lines.begin(), lines.end(),
      [](const Line& a, const Line& b) { return a.order_key < b.order_key; });
  for (const Line& line : lines) out << line.text << '\n';
}

void PipelineOutput::Finish() {
  WriteSorted(rows_, output_);
  lines_written_ = static_cast<int64_t>(rows_.size());
  WriteSorted(errors_seen_, errors_);
  rows_.clear();
  errors_seen_.clear();
}

}  // namespace sdg
