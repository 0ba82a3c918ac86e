#include "server/jobs/batch_line.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace sdg {
namespace {

// Keeps the body's keys in the order sent: it goes to the backend as the
// client wrote it.
using Json = nlohmann::ordered_json;

v1::BatchLineError LineError(int64_t number, absl::string_view code,
                             std::string message, absl::string_view param) {
  v1::BatchLineError error;
  error.set_code(std::string(code));
  error.set_line(number);
  error.set_message(std::move(message));
  error.set_param(std::string(param));
  return error;
}

// `text` as a JSON string literal.
std::string Quote(absl::string_view text) {
  return Json(std::string(text))
      .dump(-1, ' ', false, Json::error_handler_t::replace);
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
  (*row.mutable_fields())[std::string(kLineColumn)].set_string_value(
      std::string(line));
  return row;
}

absl::string_view RowLine(const google::protobuf::Struct& row) {
  auto it = row.fields().find(std::string(kLineColumn));
  if (it == row.fields().end()) return "";
  return it->second.string_value();
}

ParsedBatchLine ParseBatchLine(absl::string_view text, int64_t number) {
  ParsedBatchLine parsed;
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
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
  auto custom_id = json.find("custom_id");
  if (custom_id == json.end() || !custom_id->is_string() ||
      custom_id->get_ref<const std::string&>().empty()) {
    return missing("custom_id", "a string that is not empty");
  }
  auto method = json.find("method");
  if (method == json.end() || !method->is_string()) {
    return missing("method", "\"POST\"");
  }
  if (method->get_ref<const std::string&>() != "POST") {
    parsed.error = LineError(number, "invalid_method",
                             "The line's method must be \"POST\".", "method");
    return parsed;
  }
  auto url = json.find("url");
  if (url == json.end() || !url->is_string()) {
    return missing("url", "one of the batch endpoints");
  }
  auto body = json.find("body");
  if (body == json.end() || !body->is_object()) {
    return missing("body", "a JSON object (the request's body)");
  }
  BatchLine& line = parsed.line.emplace();
  line.custom_id = custom_id->get<std::string>();
  line.url = url->get<std::string>();
  if (auto model = body->find("model");
      model != body->end() && model->is_string()) {
    line.model = model->get<std::string>();
  }
  line.body = body->dump(-1, ' ', false, Json::error_handler_t::replace);
  return parsed;
}

void BatchFileValidator::Fail(v1::BatchLineError error) {
  ++error_count_;
  if (errors_.size() < kMaxErrors) errors_.push_back(std::move(error));
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
    Fail(LineError(
        number, "url_mismatch",
        absl::StrCat("The line's url ", Quote(line.url),
                     " is not the batch's endpoint ", Quote(endpoint_), "."),
        "url"));
    return;
  }
  if (!custom_ids_.insert(absl::HashOf(line.custom_id)).second) {
    Fail(LineError(number, "duplicate_custom_id",
                   absl::StrCat("The custom_id ", Quote(line.custom_id),
                                " is on an earlier line; each must be unique "
                                "in the file."),
                   "custom_id"));
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
                                Quote(line.model), "."),
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
  return absl::StrCat("{\"id\":", Quote(BatchRequestId(job_id, row_index)),
                      ",\"custom_id\":", Quote(custom_id),
                      ",\"response\":{\"status_code\":", status_code,
                      ",\"request_id\":", Quote(request_id), ",\"body\":", body,
                      "},\"error\":null}");
}

std::string BatchErrorLine(absl::string_view job_id, int64_t row_index,
                           absl::string_view custom_id, int http_status,
                           absl::string_view code, absl::string_view message) {
  const std::string head =
      absl::StrCat("{\"id\":", Quote(BatchRequestId(job_id, row_index)),
                   ",\"custom_id\":", Quote(custom_id));
  if (http_status != 0) {
    return absl::StrCat(
        head, ",\"response\":{\"status_code\":", http_status,
        ",\"request_id\":\"\",\"body\":{\"error\":{\"message\":",
        Quote(message), ",\"type\":", Quote(code),
        ",\"param\":null,\"code\":null}}},\"error\":null}");
  }
  return absl::StrCat(head,
                      ",\"response\":null,\"error\":{\"code\":", Quote(code),
                      ",\"message\":", Quote(message), "}}");
}

std::string CustomIdOf(absl::string_view text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return "";
  auto custom_id = json.find("custom_id");
  if (custom_id == json.end() || !custom_id->is_string()) return "";
  return custom_id->get<std::string>();
}

}  // namespace sdg
