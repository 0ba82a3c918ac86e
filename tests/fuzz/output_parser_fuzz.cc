// Pipeline output parsers: a pattern (Python re syntax, compiled by PCRE2)
// and a text, both from the input (split at the first NUL), then the tag
// parser over the same text.
#include <cstddef>
#include <cstdint>

#include "server/pipeline/output_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const absl::string_view pattern = input.substr(0, nul);
  const absl::string_view text =
      nul == input.npos ? absl::string_view() : input.substr(nul + 1);
  absl::StatusOr<sdg::OutputParser> by_pattern =
      sdg::OutputParser::Pattern({"a", "b"}, pattern, {"[END]"});
  if (by_pattern.ok()) (void)by_pattern->Parse(text);
  absl::StatusOr<sdg::OutputParser> by_tags = sdg::OutputParser::Tags(
      {"question", "answer"}, {"[Q]", ""}, {"[/Q]", ""});
  if (by_tags.ok()) (void)by_tags->Parse(text);
  return 0;
}
