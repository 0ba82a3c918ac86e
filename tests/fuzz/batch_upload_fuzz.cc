// A Batch API upload as sdgd reads it: the multipart/form-data body (the
// first input byte picks the boundary's length, the second how the body is
// cut into the pieces the HTTP port hands on), then each line of its parts
// as a batch's validation parses it. Read whole or in pieces, the parts
// must be the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/api/multipart.h"
#include "server/jobs/batch_line.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data) + 2,
                                size - 2);
  const size_t boundary_length = std::min<size_t>(data[0] % 16, input.size());
  const size_t step = 1 + data[1] % 64;
  const std::string content_type = absl::StrCat(
      "multipart/form-data; boundary=", input.substr(0, boundary_length));
  const absl::string_view body = input.substr(boundary_length);
  auto parts = sdg::ParseMultipart(content_type, body);

  auto reader = sdg::MultipartReader::Create(content_type);
  if (reader.ok()) {
    sdg::FormPartsCollector pieces;
    absl::Status fed;
    for (size_t at = 0; at < body.size() && fed.ok(); at += step) {
      fed = reader->Feed(body.substr(at, step), pieces);
    }
    if (fed.ok()) fed = reader->Finish();
    if (fed.ok() != parts.ok()) abort();
    if (parts.ok()) {
      if (pieces.parts().size() != parts->size()) abort();
      for (size_t i = 0; i < parts->size(); ++i) {
        if (pieces.parts()[i].name != (*parts)[i].name ||
            pieces.parts()[i].filename != (*parts)[i].filename ||
            pieces.parts()[i].data != (*parts)[i].data) {
          abort();
        }
      }
    }
  }
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
