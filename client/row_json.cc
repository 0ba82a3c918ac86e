#include "client/row_json.h"

#include <cmath>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace sdg {
namespace {

void JsonToValue(const JsonRow& json, google::protobuf::Value* value) {
  switch (json.type()) {
    case JsonRow::value_t::null:
    case JsonRow::value_t::discarded:
      value->set_null_value(google::protobuf::NULL_VALUE);
      break;
    case JsonRow::value_t::boolean:
      value->set_bool_value(json.get<bool>());
      break;
    case JsonRow::value_t::number_integer:
    case JsonRow::value_t::number_unsigned:
    case JsonRow::value_t::number_float:
      value->set_number_value(json.get<double>());
      break;
    case JsonRow::value_t::string:
      value->set_string_value(json.get<std::string>());
      break;
    case JsonRow::value_t::array: {
      auto* list = value->mutable_list_value();
      for (const JsonRow& item : json) JsonToValue(item, list->add_values());
      break;
    }
    case JsonRow::value_t::object:
      *value->mutable_struct_value() = JsonToStruct(json);
      break;
    case JsonRow::value_t::binary:
      value->set_null_value(google::protobuf::NULL_VALUE);
      break;
  }
}

std::string TypeName(const JsonRow& json) {
  return json.is_array() ? "an array" : absl::StrCat("a ", json.type_name());
}

}  // namespace

absl::StatusOr<std::vector<JsonRow>> ReadJsonlRows(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  std::vector<JsonRow> rows;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    JsonRow row = JsonRow::parse(line, nullptr, false);
    if (row.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": not valid JSON"));
    }
    if (!row.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": expected a JSON object, got ",
                       TypeName(row)));
    }
    rows.push_back(std::move(row));
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading ", path));
  }
  return rows;
}

google::protobuf::Struct JsonToStruct(const JsonRow& object) {
  google::protobuf::Struct out;
  for (const auto& [key, item] : object.items()) {
    JsonToValue(item, &(*out.mutable_fields())[key]);
  }
  return out;
}

JsonRow ValueToJson(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kBoolValue:
      return value.bool_value();
    case google::protobuf::Value::kNumberValue: {
      // A Struct holds every number as a double; one that is a whole number
      // (and exact, under 2^53) was an integer in the input, and is written
      // as one, as protobuf's JSON printer does.
      const double number = value.number_value();
      constexpr double kExact = 9007199254740992.0;  // 2^53
      if (std::trunc(number) == number && std::fabs(number) < kExact) {
        return static_cast<int64_t>(number);
      }
      return number;
    }
    case google::protobuf::Value::kStringValue:
      return value.string_value();
    case google::protobuf::Value::kListValue: {
      JsonRow list = JsonRow::array();
      for (const auto& item : value.list_value().values()) {
        list.push_back(ValueToJson(item));
      }
      return list;
    }
    case google::protobuf::Value::kStructValue: {
      JsonRow object = JsonRow::object();
      for (const auto& [key, item] : value.struct_value().fields()) {
        object[key] = ValueToJson(item);
      }
      return object;
    }
    default:
      return nullptr;
  }
}

}  // namespace sdg
