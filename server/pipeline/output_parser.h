// How an LLM step turns one generation into rows of column values, as
// InstructLab SDG's LLMBlock parses its replies: tag pairs, or a regular
// expression with Python `re` syntax (PCRE2) whose groups are the columns.
#ifndef SDG_SERVER_JOBS_OUTPUT_PARSER_H_
#define SDG_SERVER_JOBS_OUTPUT_PARSER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdg {

class CompiledPattern;

// One output row's values, one per output column; nullopt is JSON null (the
// whole-text parser's value for an empty generation, as in LLMBlock).
using ParsedValues = std::vector<std::optional<std::string>>;

class OutputParser {
 public:
  // Match work allowed per reply (PCRE2's match limit): a pattern that
  // backtracks without end fails that reply, not the server.
  static constexpr uint32_t kMatchLimit = 10'000'000;

  // `start_tags[i]` .. `end_tags[i]` → `columns[i]`: every non-overlapping
  // span between the pair, stripped; a pair of two empty tags takes the whole
  // text, stripped. Pairs beyond the shortest of the three lists are unused
  // (LLMBlock zips them). INVALID_ARGUMENT when no pair is left.
  static absl::StatusOr<OutputParser> Tags(std::vector<std::string> columns,
                                           std::vector<std::string> start_tags,
                                           std::vector<std::string> end_tags);

  // Every match of `pattern` (compiled as Python compiles a str pattern with
  // re.DOTALL: Unicode classes, `.` matches newlines) is a row. With two or
  // more groups, group i → columns[i], stripped, with each of `cleanup_tags`
  // removed; with one group or none, the group (or the whole match),
  // stripped, goes to columns[0] and cleanup_tags are not applied (as
  // re.findall and LLMBlock do). INVALID_ARGUMENT names the position of a
  // pattern that does not compile.
  static absl::StatusOr<OutputParser> Pattern(
      std::vector<std::string> columns, absl::string_view pattern,
      std::vector<std::string> cleanup_tags);

  // The rows `text` yields, in order: the i-th row takes the i-th value of
  // every column, and there are as many rows as the column with the fewest
  // values has (none when a column has no match). RESOURCE_EXHAUSTED when
  // the pattern passes its match limit on this text.
  absl::StatusOr<std::vector<ParsedValues>> Parse(absl::string_view text) const;

  const std::vector<std::string>& columns() const { return columns_; }

 private:
  struct TagPair {
    std::string start;
    std::string end;
  };

  OutputParser() = default;

  std::vector<std::string> ParseTagPair(const TagPair& pair,
                                        absl::string_view text) const;
  absl::StatusOr<std::vector<ParsedValues>> ParsePattern(
      absl::string_view text) const;

  std::vector<std::string> columns_;
  std::vector<TagPair> tags_;                       // the tags parser
  std::shared_ptr<const CompiledPattern> pattern_;  // or the pattern parser
  std::vector<std::string> cleanup_tags_;
};

// Python's str.strip(): removes leading and trailing whitespace (ASCII
// whitespace and the separators \x1c-\x1f, as str.isspace() has them).
absl::string_view PythonStrip(absl::string_view text);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_OUTPUT_PARSER_H_
