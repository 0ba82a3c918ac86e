#include "server/jobs/batch_line.h"

#include <simdjson.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"

namespace sdg {
namespace {

v1::BatchLineError LineError(int64_t number, absl::string_view code,
                             std::string message, absl::string_view param) {
  v1::BatchLineError error;
  error.set_code(std::string(code));
  error.set_line(number);
  error.set_message(std::move(message));
  error.set_param(std::string(param));
  return error;
}

}  // namespace

bool IsBatchEndpoint(absl::string_view endpoint) {
  for (absl::string_view known : kBatchEndpoints) {
    if (endpoint == known) return true;
  }
  return false;
}

google::protobuf::Struct LineRow(absl::string_view line) {
  google::protobuf::Struct row;
  SetLineRow(line, row);
  return row;
}

void SetLineRow(absl::string_view line, google::protobuf::Struct& row) {
  auto& fields = *row.mutable_fields();
  if (fields.size() != 1) fields.clear();
  fields[std::string(kLineColumn)].mutable_string_value()->assign(line.data(),
                                                                  line.size());
}

absl::string_view RowLine(const google::protobuf::Struct& row) {
  auto it = row.fields().find(std::string(kLineColumn));
  if (it == row.fields().end()) return "";
  return it->second.string_value();
}

namespace {

// A varint at the front of `in`, consumed.
bool ConsumeVarint(absl::string_view& in, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// A length-delimited field with `tag` (its number and wire type 2, one
// byte) at the front of `in`, consumed: its bytes in `field`.
bool ConsumeDelimited(absl::string_view& in, uint8_t tag,
                      absl::string_view& field) {
  if (in.empty() || static_cast<uint8_t>(in.front()) != tag) return false;
  in.remove_prefix(1);
  uint64_t size = 0;
  if (!ConsumeVarint(in, size) || size > in.size()) return false;
  field = in.substr(0, size);
  in.remove_prefix(size);
  return true;
}

}  // namespace

std::optional<absl::string_view> EncodedRowLine(absl::string_view encoded) {
  // Struct {fields = 1: {key = 1: "line", value = 2: Value {string_value =
  // 3}}}, each field length-delimited: (number << 3) | 2.
  absl::string_view entry, key, value, line;
  if (!ConsumeDelimited(encoded, 0x0a, entry) || !encoded.empty() ||
      !ConsumeDelimited(entry, 0x0a, key) || key != kLineColumn ||
      !ConsumeDelimited(entry, 0x12, value) || !entry.empty() ||
      !ConsumeDelimited(value, 0x1a, line) || !value.empty()) {
    return std::nullopt;
  }
  return line;
}

absl::Status ReadFileLines(
    const Dataset& file, int64_t first, int64_t count,
    absl::FunctionRef<absl::Status(absl::string_view)> on_line) {
  // A window at a time, so that a file of any size reads in flat memory.
  constexpr int64_t kRowsAtOnce = 1024;
  google::protobuf::Struct row;
  int64_t index = first;
  auto take = [&](absl::string_view encoded) -> absl::Status {
    const int64_t at = index++;
    if (std::optional<absl::string_view> line = EncodedRowLine(encoded)) {
      return on_line(*line);
    }
    if (!row.ParseFromArray(encoded.data(), static_cast<int>(encoded.size()))) {
      return absl::DataLossError(
          absl::StrCat("row ", at, " of the file is damaged"));
    }
    return on_line(RowLine(row));
  };
  for (int64_t start = first; start < first + count; start += kRowsAtOnce) {
    SDG_RETURN_IF_ERROR(file.ReadEncodedRows(
        start, std::min(kRowsAtOnce, first + count - start), take));
  }
  return absl::OkStatus();
}

// Lines are parsed with simdjson (a file's lines are read twice: by the
// batch's validation and by its shards). Its DOM validates the whole line;
// an integer too large for 64 bits is refused as not parseable, where
// nlohmann would have read it as a double.
ParsedBatchLine ParseBatchLine(absl::string_view text, int64_t number) {
  ParsedBatchLine parsed;
  ThreadJsonParser parser;
  simdjson::dom::element root;
  simdjson::dom::object object;
  if (parser.Parse(text, root) != simdjson::SUCCESS ||
      root.get_object().get(object) != simdjson::SUCCESS) {
    parsed.error =
        LineError(number, "invalid_json_line",
                  "This line is not parseable as a JSON object.", "");
    return parsed;
  }
  auto missing = [&](absl::string_view field, absl::string_view kind) {
    parsed.error = LineError(
        number, "missing_required_parameter",
        absl::StrCat("The line's ", field, " must be ", kind, "."), field);
    return parsed;
  };
  std::string_view custom_id;
  if (object["custom_id"].get_string().get(custom_id) != simdjson::SUCCESS ||
      custom_id.empty()) {
    return missing("custom_id", "a string that is not empty");
  }
  std::string_view method;
  if (object["method"].get_string().get(method) != simdjson::SUCCESS) {
    return missing("method", "\"POST\"");
  }
  if (method != "POST") {
    parsed.error = LineError(number, "invalid_method",
                             "The line's method must be \"POST\".", "method");
    return parsed;
  }
  std::string_view url;
  if (object["url"].get_string().get(url) != simdjson::SUCCESS) {
    return missing("url", "one of the batch endpoints");
  }
  simdjson::dom::object body;
  if (object["body"].get_object().get(body) != simdjson::SUCCESS) {
    return missing("body", "a JSON object (the request's body)");
  }
  BatchLine& line = parsed.line.emplace();
  line.custom_id = std::string(custom_id);
  line.url = std::string(url);
  std::string_view model;
  if (body["model"].get_string().get(model) == simdjson::SUCCESS) {
    line.model = std::string(model);
  }
  auto number_at = [&body](const char* field) -> std::optional<double> {
    double value = 0;
    if (body[field].get_double().get(value) != simdjson::SUCCESS) {
      return std::nullopt;
    }
    return value;
  };
  line.n = number_at("n");
  line.max_tokens = number_at("max_tokens");
  line.temperature = number_at("temperature");
  line.top_p = number_at("top_p");
  line.body = simdjson::minify(body);
  return parsed;
}

void BatchFileValidator::Fail(v1::BatchLineError error) {
  ++error_count_;
  if (errors_.size() < kMaxErrors) errors_.push_back(std::move(error));
}

std::optional<v1::BatchLineError> BatchFileValidator::CheckBody(
    const BatchLine& line, int64_t number) const {
  auto invalid = [number](absl::string_view param, std::string message) {
    return LineError(number, "invalid_value", std::move(message), param);
  };
  if (line.body.size() > limits_.max_body_bytes) {
    return invalid("body", absl::StrCat("The line's body is longer than ",
                                        limits_.max_body_bytes,
                                        " bytes (the server's "
                                        "--max_prompt_bytes)."));
  }
  if (line.n.has_value() &&
      !(*line.n >= 1 && *line.n <= limits_.max_samples &&
        *line.n == static_cast<double>(static_cast<int64_t>(*line.n)))) {
    return invalid("body.n",
                   absl::StrCat("The line's body.n must be a whole number "
                                "from 1 to ",
                                limits_.max_samples, "."));
  }
  if (line.max_tokens.has_value() && *line.max_tokens < 0) {
    return invalid("body.max_tokens",
                   "The line's body.max_tokens must not be negative.");
  }
  if (line.temperature.has_value() && !(*line.temperature >= 0)) {
    return invalid("body.temperature",
                   "The line's body.temperature must not be negative.");
  }
  if (line.top_p.has_value() && !(*line.top_p > 0 && *line.top_p <= 1)) {
    return invalid("body.top_p", "The line's body.top_p must be in (0, 1].");
  }
  return std::nullopt;
}

void BatchFileValidator::Add(absl::string_view text) {
  const int64_t number = ++lines_;
  ParsedBatchLine parsed = ParseBatchLine(text, number);
  if (!parsed.line.has_value()) {
    Fail(std::move(parsed.error));
    return;
  }
  const BatchLine& line = *parsed.line;
  if (!seen_model_) {
    model_ = line.model;
    seen_model_ = true;
  } else if (line.model != model_) {
    several_models_ = true;
  }
  if (line.url != endpoint_) {
    Fail(LineError(number, "url_mismatch",
                   absl::StrCat("The line's url ", JsonString(line.url),
                                " is not the batch's endpoint ",
                                JsonString(endpoint_), "."),
                   "url"));
    return;
  }
  if (!custom_ids_.insert(absl::HashOf(line.custom_id)).second) {
    Fail(LineError(number, "duplicate_custom_id",
                   absl::StrCat("The custom_id ", JsonString(line.custom_id),
                                " is on an earlier line; each must be unique "
                                "in the file."),
                   "custom_id"));
    return;
  }
  if (std::optional<v1::BatchLineError> bad = CheckBody(line, number)) {
    Fail(*std::move(bad));
    return;
  }
  if (line.model.empty()) {
    Fail(LineError(number, "missing_required_parameter",
                   "The line's body.model must name the model to ask.",
                   "body.model"));
    return;
  }
  if (!model_served_(line.model)) {
    Fail(LineError(number, "model_not_found",
                   absl::StrCat("No backend of this server serves the model ",
                                JsonString(line.model), "."),
                   "body.model"));
  }
}

std::string BatchRequestId(absl::string_view job_id, int64_t row_index) {
  return absl::StrCat("batch_req_", job_id, "_", row_index);
}

std::string BatchOutputLine(absl::string_view job_id, int64_t row_index,
                            absl::string_view custom_id, int status_code,
                            absl::string_view request_id,
                            absl::string_view body) {
  std::string line;
  line.reserve(body.size() + custom_id.size() + 2 * request_id.size() + 96);
  line.append("{\"id\":");
  AppendJsonString(BatchRequestId(job_id, row_index), line);
  line.append(",\"custom_id\":");
  AppendJsonString(custom_id, line);
  absl::StrAppend(&line, ",\"response\":{\"status_code\":", status_code,
                  ",\"request_id\":");
  AppendJsonString(request_id, line);
  absl::StrAppend(&line, ",\"body\":", body, "},\"error\":null}");
  return line;
}

std::string BatchErrorLine(absl::string_view job_id, int64_t row_index,
                           absl::string_view custom_id, int http_status,
                           absl::string_view code, absl::string_view message) {
  const std::string head =
      absl::StrCat("{\"id\":", JsonString(BatchRequestId(job_id, row_index)),
                   ",\"custom_id\":", JsonString(custom_id));
  if (http_status != 0) {
    return absl::StrCat(
        head, ",\"response\":{\"status_code\":", http_status,
        ",\"request_id\":\"\",\"body\":{\"error\":{\"message\":",
        JsonString(message), ",\"type\":", JsonString(code),
        ",\"param\":null,\"code\":null}}},\"error\":null}");
  }
  return absl::StrCat(
      head, ",\"response\":null,\"error\":{\"code\":", JsonString(code),
      ",\"message\":", JsonString(message), "}}");
}

std::string CustomIdOf(absl::string_view text) {
  ThreadJsonParser parser;
  simdjson::dom::element root;
  std::string_view custom_id;
  if (parser.Parse(text, root) != simdjson::SUCCESS ||
      root["custom_id"].get_string().get(custom_id) != simdjson::SUCCESS) {
    return "";
  }
  return std::string(custom_id);
}

}  // namespace sdg
