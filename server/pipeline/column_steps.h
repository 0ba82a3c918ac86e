// The steps of a pipeline that work on columns, row by row, as InstructLab
// SDG's blocks do over a whole dataset: FilterByValueBlock,
// DuplicateColumnsBlock, RenameColumnsBlock, CombineColumnsBlock,
// FlattenColumnsBlock (pandas' melt, one row per listed column) and a
// step's drop_columns. Each works on one row, so a shard's rows pass
// through them as soon as they are ready; where InstructLab's block would
// raise for the whole dataset (a missing column, a type it cannot join),
// the row fails with an error naming the column.
#ifndef SDG_SERVER_JOBS_COLUMN_STEPS_H_
#define SDG_SERVER_JOBS_COLUMN_STEPS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace sdg {

using Row = google::protobuf::Struct;
using ColumnMap = std::vector<std::pair<std::string, std::string>>;

// Python's operator functions, `column OP value`.
enum class FilterOperation { kEq, kNe, kGt, kGe, kLt, kLe, kContains };
// FilterByValueBlock's convert_dtype: Python's float(), int() or bool().
enum class ConvertType { kNone, kFloat, kInt, kBool };

// Parses "eq", "ne", ..., "contains"; "float", "int", "bool" (empty: none).
absl::StatusOr<FilterOperation> ParseFilterOperation(absl::string_view name);
absl::StatusOr<ConvertType> ParseConvertType(absl::string_view name);

// Keeps a row when `column OP v` holds for any of the values. With a
// convert type, the column takes its converted value first, and a value
// that does not convert takes the default (0, 0.0, false unless given).
class ValueFilter {
 public:
  // The filter values are converted too; one that does not convert is an
  // INVALID_ARGUMENT naming it (a mistake in the pipeline, not in a row).
  static absl::StatusOr<ValueFilter> Create(
      std::string column, const std::vector<google::protobuf::Value>& values,
      FilterOperation operation, ConvertType convert,
      std::optional<google::protobuf::Value> default_value);

  // Whether the row stays (after converting its column). INVALID_ARGUMENT
  // for a row without the column, or whose value cannot be compared (a
  // string with a number under gt, as Python's TypeError).
  absl::StatusOr<bool> Keep(Row& row) const;

 private:
  ValueFilter() = default;

  std::string column_;
  std::vector<google::protobuf::Value> values_;
  FilterOperation operation_ = FilterOperation::kEq;
  ConvertType convert_ = ConvertType::kNone;
  google::protobuf::Value default_value_;
};

// Python's float(), int() and bool() of a JSON value; nullopt where Python
// raises ValueError (or TypeError: null and lists do not convert).
std::optional<google::protobuf::Value> ConvertValue(
    const google::protobuf::Value& value, ConvertType type);

// DuplicateColumnsBlock: each `from` column copied to `to`.
absl::Status DuplicateColumns(const ColumnMap& columns, Row& row);
// RenameColumnsBlock: every rename at once, so `a→b, c→a` swaps names.
absl::Status RenameColumns(const ColumnMap& columns, Row& row);
// CombineColumnsBlock: the string columns joined by `separator`.
absl::Status CombineColumns(const std::vector<std::string>& columns,
                            const std::string& output_column,
                            const std::string& separator, Row& row);
// FlattenColumnsBlock for one row: one row per listed column, holding the
// other columns, `var_name` = the column's name and `value_name` = its
// value. The dataset order is variable-major (every row's first listed
// column, then every row's second): the caller orders by the index in the
// result.
absl::StatusOr<std::vector<Row>> FlattenColumns(
    const std::vector<std::string>& var_columns, const std::string& value_name,
    const std::string& var_name, const Row& row);
// A step's drop_columns: those the row has.
void DropColumns(const std::vector<std::string>& columns, Row& row);

// drop_duplicates' key: the listed columns' values, serialized so that equal
// values (as pandas compares them) give equal keys. INVALID_ARGUMENT for a
// row without one of the columns.
absl::StatusOr<std::string> DuplicateKey(
    const std::vector<std::string>& columns, const Row& row);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_COLUMN_STEPS_H_
