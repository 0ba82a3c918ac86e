#include "server/pipeline/column_steps.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "google/protobuf/util/message_differencer.h"

namespace sdg {
namespace {

using google::protobuf::Value;

const char* KindName(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNullValue:
      return "null";
    case Value::kNumberValue:
      return "a number";
    case Value::kStringValue:
      return "a string";
    case Value::kBoolValue:
      return "a bool";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue:
      return "a list";
    default:
      return "empty";
  }
}

Value Number(double number) {
  Value value;
  value.set_number_value(number);
  return value;
}

// Numbers and bools are one kind to Python's operators (True == 1).
std::optional<double> AsNumber(const Value& value) {
  if (value.has_number_value()) return value.number_value();
  if (value.has_bool_value()) return value.bool_value() ? 1.0 : 0.0;
  return std::nullopt;
}

bool PythonEqual(const Value& a, const Value& b) {
  std::optional<double> x = AsNumber(a), y = AsNumber(b);
  if (x.has_value() || y.has_value()) {
    return x.has_value() && y.has_value() && *x == *y;
  }
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// A decimal number as Python's int() or float() reads a string: surrounding
// whitespace, a sign, digits with single underscores between them.
std::optional<std::string> PythonDigits(absl::string_view text,
                                        bool allow_float) {
  text = absl::StripAsciiWhitespace(text);
  std::string digits;
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    digits += text[i++];
  }
  const absl::string_view rest = text.substr(i);
  if (allow_float) {
    std::string lower = absl::AsciiStrToLower(rest);
    if (lower == "inf" || lower == "infinity" || lower == "nan") {
      return digits + lower;
    }
  }
  bool any_digit = false;
  for (size_t j = 0; j < rest.size(); ++j) {
    const char c = rest[j];
    if (absl::ascii_isdigit(c)) {
      digits += c;
      any_digit = true;
    } else if (c == '_' && j > 0 && j + 1 < rest.size() &&
               absl::ascii_isdigit(rest[j - 1]) &&
               absl::ascii_isdigit(rest[j + 1])) {
      continue;
    } else if (allow_float && (c == '.' || c == 'e' || c == 'E' ||
                               ((c == '+' || c == '-') && j > 0 &&
                                (rest[j - 1] == 'e' || rest[j - 1] == 'E')))) {
      digits += c;
    } else {
      return std::nullopt;
    }
  }
  if (!any_digit) return std::nullopt;
  return digits;
}

absl::StatusOr<bool> Compare(const Value& column, FilterOperation operation,
                             const Value& value) {
  switch (operation) {
    case FilterOperation::kEq:
      return PythonEqual(column, value);
    case FilterOperation::kNe:
      return !PythonEqual(column, value);
    case FilterOperation::kContains:
      if (column.has_string_value() && value.has_string_value()) {
        return column.string_value().find(value.string_value()) !=
               std::string::npos;
      }
      if (column.has_list_value()) {
        const auto& items = column.list_value().values();
        return std::any_of(items.begin(), items.end(), [&](const Value& item) {
          return PythonEqual(item, value);
        });
      }
      if (column.has_struct_value() && value.has_string_value()) {
        return column.struct_value().fields().contains(value.string_value());
      }
      return absl::InvalidArgumentError(
          absl::StrCat("contains cannot look for ", KindName(value), " in ",
                       KindName(column)));
    default:
      break;
  }
  int order = 0;
  std::optional<double> x = AsNumber(column), y = AsNumber(value);
  if (x.has_value() && y.has_value()) {
    if (std::isnan(*x) || std::isnan(*y)) return false;
    order = *x < *y ? -1 : *x > *y ? 1 : 0;
  } else if (column.has_string_value() && value.has_string_value()) {
    // Byte order of UTF-8 is code point order, as Python compares str.
    order = column.string_value().compare(value.string_value());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot order ", KindName(column), " against ", KindName(value)));
  }
  switch (operation) {
    case FilterOperation::kGt:
      return order > 0;
    case FilterOperation::kGe:
      return order >= 0;
    case FilterOperation::kLt:
      return order < 0;
    default:
      return order <= 0;
  }
}

void AppendKey(const Value& value, std::string& key) {
  if (std::optional<double> number = AsNumber(value)) {
    absl::StrAppend(&key, "n", *number, ";");
  } else if (value.has_string_value()) {
    absl::StrAppend(&key, "s", value.string_value().size(), ":",
                    value.string_value());
  } else if (value.has_list_value()) {
    key += "[";
    for (const Value& item : value.list_value().values()) AppendKey(item, key);
    key += "]";
  } else if (value.has_struct_value()) {
    std::vector<const std::string*> names;
    for (const auto& [name, field] : value.struct_value().fields()) {
      names.push_back(&name);
    }
    std::sort(
        names.begin(), names.end(),
        [](const std::string* a, const std::string* b) { return *a < *b; });
    key += "{";
    for (const std::string* name : names) {
      absl::StrAppend(&key, name->size(), ":", *name);
      AppendKey(value.struct_value().fields().at(*name), key);
    }
    key += "}";
  } else {
    key += "z";  // null
  }
}

absl::Status MissingColumn(absl::string_view step, absl::string_view column) {
  return absl::InvalidArgumentError(
      absl::StrCat(step, ": the row has no column ", Quoted(column)));
}

}  // namespace

absl::StatusOr<FilterOperation> ParseFilterOperation(absl::string_view name) {
  static constexpr std::pair<absl::string_view, FilterOperation> kNames[] = {
      {"eq", FilterOperation::kEq},
      {"ne", FilterOperation::kNe},
      {"gt", FilterOperation::kGt},
      {"ge", FilterOperation::kGe},
      {"lt", FilterOperation::kLt},
      {"le", FilterOperation::kLe},
      {"contains", FilterOperation::kContains}};
  for (const auto& [known, operation] : kNames) {
    if (name == known) return operation;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("operation ", Quoted(name),
                   " is not one of eq, ne, gt, ge, lt, le, contains"));
}

absl::StatusOr<ConvertType> ParseConvertType(absl::string_view name) {
  if (name.empty()) return ConvertType::kNone;
  if (name == "float") return ConvertType::kFloat;
  if (name == "int") return ConvertType::kInt;
  if (name == "bool") return ConvertType::kBool;
  return absl::InvalidArgumentError(absl::StrCat(
      "convert_dtype ", Quoted(name), " is not one of float, int, bool"));
}

std::optional<Value> ConvertValue(const Value& value, ConvertType type) {
  switch (type) {
    case ConvertType::kNone:
      return value;
    case ConvertType::kBool: {
      Value converted;
      switch (value.kind_case()) {
        case Value::kNumberValue:
          converted.set_bool_value(value.number_value() != 0);
          break;
        case Value::kBoolValue:
          converted.set_bool_value(value.bool_value());
          break;
        case Value::kStringValue:
          converted.set_bool_value(!value.string_value().empty());
          break;
        case Value::kListValue:
          converted.set_bool_value(value.list_value().values_size() > 0);
          break;
        case Value::kStructValue:
          converted.set_bool_value(value.struct_value().fields_size() > 0);
          break;
        default:
          converted.set_bool_value(false);
      }
      return converted;
    }
    case ConvertType::kFloat:
    case ConvertType::kInt:
      break;
  }
  const bool to_float = type == ConvertType::kFloat;
  if (std::optional<double> number = AsNumber(value)) {
    if (to_float) return Number(*number);
    if (!std::isfinite(*number)) return std::nullopt;  // int(inf) raises
    return Number(std::trunc(*number));
  }
  if (!value.has_string_value()) return std::nullopt;  // TypeError
  std::optional<std::string> digits =
      PythonDigits(value.string_value(), to_float);
  if (!digits.has_value()) return std::nullopt;
  char* end = nullptr;
  const double parsed = std::strtod(digits->c_str(), &end);
  if (end != digits->c_str() + digits->size()) return std::nullopt;
  return Number(parsed);
}

absl::StatusOr<ValueFilter> ValueFilter::Create(
    std::string column, const std::vector<Value>& values,
    FilterOperation operation, ConvertType convert,
    std::optional<Value> default_value) {
  if (values.empty()) {
    return absl::InvalidArgumentError("filter_by_value needs a value");
  }
  ValueFilter filter;
  filter.column_ = std::move(column);
  filter.operation_ = operation;
  filter.convert_ = convert;
  if (default_value.has_value()) {
    std::optional<Value> converted = ConvertValue(*default_value, convert);
    if (!converted.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("default_value (", KindName(*default_value),
                       ") does not convert to the convert_dtype"));
    }
    filter.default_value_ = *std::move(converted);
  } else {
    // DTypeConverter's defaults: 0.0, 0, False.
    filter.default_value_ = ConvertValue(Number(0), convert).value_or(Value());
  }
  for (const Value& value : values) {
    std::optional<Value> converted = ConvertValue(value, convert);
    if (!converted.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter value (", KindName(value),
                       ") does not convert to the convert_dtype"));
    }
    filter.values_.push_back(*std::move(converted));
  }
  return filter;
}

absl::StatusOr<bool> ValueFilter::Keep(Row& row) const {
  auto field = row.mutable_fields()->find(column_);
  if (field == row.mutable_fields()->end()) {
    return MissingColumn("filter_by_value", column_);
  }
  if (convert_ != ConvertType::kNone) {
    field->second =
        ConvertValue(field->second, convert_).value_or(default_value_);
  }
  for (const Value& value : values_) {
    absl::StatusOr<bool> holds = Compare(field->second, operation_, value);
    if (!holds.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter_by_value on column ", Quoted(column_), ": ",
                       holds.status().message()));
    }
    if (*holds) return true;
  }
  return false;
}

absl::Status DuplicateColumns(const ColumnMap& columns, Row& row) {
  auto& fields = *row.mutable_fields();
  for (const auto& [from, to] : columns) {
    auto source = fields.find(from);
    if (source == fields.end()) return MissingColumn("duplicate_columns", from);
    if (fields.contains(to)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "duplicate_columns: the row already has a column ", Quoted(to)));
    }
    Value copy = source->second;
    fields[to] = std::move(copy);
  }
  return absl::OkStatus();
}

absl::Status RenameColumns(const ColumnMap& columns, Row& row) {
  auto& fields = *row.mutable_fields();
  std::vector<Value> moved;
  moved.reserve(columns.size());
  for (const auto& [from, to] : columns) {
    auto source = fields.find(from);
    if (source == fields.end()) return MissingColumn("rename_columns", from);
    moved.push_back(std::move(source->second));
    fields.erase(source);
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    const std::string& to = columns[i].second;
    if (fields.contains(to)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rename_columns: the row already has a column ", Quoted(to)));
    }
    fields[to] = std::move(moved[i]);
  }
  return absl::OkStatus();
}

absl::Status CombineColumns(const std::vector<std::string>& columns,
                            const std::string& output_column,
                            const std::string& separator, Row& row) {
  std::vector<const std::string*> parts;
  for (const std::string& column : columns) {
    auto field = row.fields().find(column);
    if (field == row.fields().end()) {
      return MissingColumn("combine_columns", column);
    }
    if (!field->second.has_string_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("combine_columns: column ", Quoted(column), " is ",
                       KindName(field->second), ", not a string"));
    }
    parts.push_back(&field->second.string_value());
  }
  std::string combined = absl::StrJoin(
      parts, separator,
      [](std::string* out, const std::string* part) { *out += *part; });
  (*row.mutable_fields())[output_column].set_string_value(std::move(combined));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Row>> FlattenColumns(
    const std::vector<std::string>& var_columns, const std::string& value_name,
    const std::string& var_name, const Row& row) {
  Row ids = row;
  for (const std::string& column : var_columns) {
    if (!row.fields().contains(column)) {
      return MissingColumn("flatten_columns", column);
    }
    ids.mutable_fields()->erase(column);
  }
  for (const std::string* name : {&value_name, &var_name}) {
    if (ids.fields().contains(*name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flatten_columns: ", Quoted(*name),
          " is a column that is not flattened; choose another name"));
    }
  }
  std::vector<Row> rows;
  rows.reserve(var_columns.size());
  for (const std::string& column : var_columns) {
    Row& flat = rows.emplace_back(ids);
    auto& fields = *flat.mutable_fields();
    fields[var_name].set_string_value(column);
    fields[value_name] = row.fields().at(column);
  }
  return rows;
}

void DropColumns(const std::vector<std::string>& columns, Row& row) {
  for (const std::string& column : columns) {
    row.mutable_fields()->erase(column);
  }
}

absl::StatusOr<std::string> DuplicateKey(
    const std::vector<std::string>& columns, const Row& row) {
  std::string key;
  for (const std::string& column : columns) {
    auto field = row.fields().find(column);
    if (field == row.fields().end()) {
      return MissingColumn("drop_duplicates", column);
    }
    AppendKey(field->second, key);
  }
  return key;
}

}  // namespace sdg
