// Prompt templates: parse any text; render what parses against a row with
// the columns it names (and one without), bounded as the server bounds it.
#include <cstddef>
#include <cstdint>

#include "server/pipeline/prompt_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sdg::PromptTemplate> parsed = sdg::PromptTemplate::Parse(text);
  if (!parsed.ok()) return 0;
  google::protobuf::Struct row;
  (void)parsed->Render(row, 1 << 16);  // every column missing
  int i = 0;
  for (const std::string& column : parsed->columns()) {
    google::protobuf::Value& value = (*row.mutable_fields())[column];
    switch (i++ % 3) {
      case 0:
        value.set_string_value(column);
        break;
      case 1:
        value.set_number_value(i * 0.5);
        break;
      default:
        value.mutable_list_value()->add_values()->set_bool_value(true);
    }
  }
  (void)parsed->Render(row, 1 << 16);
  return 0;
}
