#include "server/pipeline/prompt_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "google/protobuf/util/json_util.h"

namespace sdg {

absl::StatusOr<PromptTemplate> PromptTemplate::Parse(absl::string_view text) {
  PromptTemplate result;
  std::string literal;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, 3, "\\{{") == 0) {
      literal += "{{";
      pos += 3;
      continue;
    }
    if (text.compare(pos, 2, "{{") != 0) {
      literal.push_back(text[pos++]);
      continue;
    }
    size_t close = text.find("}}", pos + 2);
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placeholder opened at offset ", pos,
          " has no closing '}}' (write '\\{{' for a literal '{{')"));
    }
    std::string name(
        absl::StripAsciiWhitespace(text.substr(pos + 2, close - pos - 2)));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty placeholder '{{}}' at offset ", pos));
    }
    if (!literal.empty()) {
      result.pieces_.push_back({std::move(literal), false});
      literal.clear();
    }
    if (std::find(result.columns_.begin(), result.columns_.end(), name) ==
        result.columns_.end()) {
      result.columns_.push_back(name);
    }
    result.pieces_.push_back({std::move(name), true});
    pos = close + 2;
  }
  if (!literal.empty()) result.pieces_.push_back({std::move(literal), false});
  return result;
}

const std::string* PromptTemplate::FindMissingColumn(
    const google::protobuf::Struct& row) const {
  for (const std::string& column : columns_) {
    if (!row.fields().contains(column)) return &column;
  }
  return nullptr;
}

absl::StatusOr<std::string> PromptTemplate::Render(
    const google::protobuf::Struct& row, size_t max_bytes) const {
  std::string out;
  for (const Piece& piece : pieces_) {
    if (!piece.is_column) {
      out += piece.text;
    } else {
      auto it = row.fields().find(piece.text);
      if (it == row.fields().end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column ", Quoted(piece.text), " is missing from the row"));
      }
      out += ValueToPromptText(it->second);
    }
    if (out.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt is longer than ", max_bytes,
                       " bytes (the server's --max_prompt_bytes)"));
    }
  }
  return out;
}

std::string ValueToPromptText(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kStringValue:
      return value.string_value();
    case google::protobuf::Value::kNullValue:
    case google::protobuf::Value::KIND_NOT_SET:
      return "";
    case google::protobuf::Value::kBoolValue:
      return value.bool_value() ? "true" : "false";
    case google::protobuf::Value::kNumberValue: {
      double number = value.number_value();
      // Whole numbers print without a fraction, others in their shortest form,
      // so a row's 3 appears as "3" and 0.1 as "0.1".
      if (std::isfinite(number) && std::trunc(number) == number &&
          std::fabs(number) < 1e15) {
        return absl::StrCat(static_cast<int64_t>(number));
      }
      char buffer[64];
      auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), number);
      return std::string(buffer, end);
    }
    case google::protobuf::Value::kStructValue:
    case google::protobuf::Value::kListValue: {
      std::string json;
      (void)google::protobuf::util::MessageToJsonString(value, &json);
      return json;
    }
  }
  return "";
}

}  // namespace sdg
