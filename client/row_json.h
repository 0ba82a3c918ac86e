// Dataset rows as JSON: reading JSON-lines files and converting between JSON
// objects and google.protobuf.Struct (the wire form of a row).
#ifndef SDG_CLIENT_ROW_JSON_H_
#define SDG_CLIENT_ROW_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace sdg {

// Keeps the file's key order, so output rows look like their input rows.
using JsonRow = nlohmann::ordered_json;

// Reads one JSON object per line; blank lines are skipped. Errors name the
// file and the line: `in.jsonl:3: not valid JSON (...)`,
// `in.jsonl:4: expected a JSON object, got an array`.
absl::StatusOr<std::vector<JsonRow>> ReadJsonlRows(const std::string& path);

google::protobuf::Struct JsonToStruct(const JsonRow& object);
JsonRow ValueToJson(const google::protobuf::Value& value);

}  // namespace sdg

#endif  // SDG_CLIENT_ROW_JSON_H_
