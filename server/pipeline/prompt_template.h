// Prompt templates: text with {{column}} placeholders filled from a row.
#ifndef SDG_SERVER_JOBS_PROMPT_TEMPLATE_H_
#define SDG_SERVER_JOBS_PROMPT_TEMPLATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace sdg {

// Syntax: `{{name}}` (spaces around the name are allowed) inserts the row's
// column `name`; `\{{` writes a literal `{{`. A string column is inserted as
// is, null as an empty string, numbers and booleans as JSON text, lists and
// objects as compact JSON.
class PromptTemplate {
 public:
  // Errors name the byte offset of the problem (unterminated or empty
  // placeholder).
  static absl::StatusOr<PromptTemplate> Parse(absl::string_view text);

  // Distinct column names, in order of first use.
  const std::vector<std::string>& columns() const { return columns_; }

  // The first column of columns() that `row` lacks, or nullptr.
  const std::string* FindMissingColumn(
      const google::protobuf::Struct& row) const;

  // Fails with INVALID_ARGUMENT naming the first missing column, or saying
  // the prompt would be longer than `max_bytes` (it stops there: a template
  // of many placeholders cannot make it allocate more).
  absl::StatusOr<std::string> Render(
      const google::protobuf::Struct& row,
      size_t max_bytes = std::string::npos) const;

 private:
  struct Piece {
    std::string text;  // literal text, or the column name
    bool is_column = false;
  };

  std::vector<Piece> pieces_;
  std::vector<std::string> columns_;
};

// How a column value appears inside a prompt.
std::string ValueToPromptText(const google::protobuf::Value& value);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_PROMPT_TEMPLATE_H_
