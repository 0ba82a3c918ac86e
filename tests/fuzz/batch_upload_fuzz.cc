// A Batch API upload as sdgd reads it: the multipart/form-data body (the
// first input byte picks the boundary's length, the rest is the body), then
// each line of its file part as a batch's validation parses it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/api/multipart.h"
#include "server/jobs/batch_line.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  const size_t boundary_length = std::min<size_t>(data[0] % 16, input.size());
  const std::string content_type = absl::StrCat(
      "multipart/form-data; boundary=", input.substr(0, boundary_length));
  auto parts = sdg::ParseMultipart(content_type, input.substr(boundary_length));
  if (!parts.ok()) return 0;
  sdg::BatchFileValidator validator(
      "/v1/chat/completions",
      [](const std::string& model) { return model.size() % 2 == 0; });
  for (const sdg::FormPart& part : *parts) {
    for (absl::string_view line : absl::StrSplit(part.data, '\n')) {
      validator.Add(line);
      sdg::ParsedBatchLine parsed = sdg::ParseBatchLine(line, 1);
      if (parsed.line.has_value()) {
        (void)sdg::BatchOutputLine("job", 0, parsed.line->custom_id, 200, "r",
                                   parsed.line->body);
      }
      (void)sdg::CustomIdOf(line);
    }
  }
  return 0;
}
