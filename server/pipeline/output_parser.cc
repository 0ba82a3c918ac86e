#include "server/pipeline/output_parser.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/quote.h"

namespace sdg {

// A compiled PCRE2 pattern, shared read-only by every thread that parses
// with it (PCRE2 allows that once compiling, JIT included, is done).
class CompiledPattern {
 public:
  static absl::StatusOr<std::shared_ptr<const CompiledPattern>> Compile(
      absl::string_view pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // Python 3 compiles str patterns Unicode-aware (\w, \d, \s); re.DOTALL
    // is LLMBlock's flag.
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
        PCRE2_UTF | PCRE2_UCP | PCRE2_DOTALL, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InvalidArgumentError(
          absl::StrCat("does not compile at offset ", offset, ": ",
                       reinterpret_cast<const char*>(message)));
    }
    // JIT when the platform has it; the interpreter otherwise.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    uint32_t groups = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &groups);
    return std::shared_ptr<const CompiledPattern>(
        new CompiledPattern(code, groups));
  }

  ~CompiledPattern() { pcre2_code_free(code_); }
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;

  uint32_t groups() const { return groups_; }

  // re.findall: every non-overlapping match, each as its groups (or, with
  // none, the whole match); an unset group is "". An empty match is allowed
  // next to the previous match but never twice at one place.
  absl::StatusOr<std::vector<std::vector<absl::string_view>>> FindAll(
      absl::string_view text, uint32_t match_limit) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_, nullptr),
        &pcre2_match_data_free);
    std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)>
        context(pcre2_match_context_create(nullptr), &pcre2_match_context_free);
    pcre2_set_match_limit(context.get(), match_limit);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::vector<std::vector<absl::string_view>> matches;
    PCRE2_SIZE offset = 0;
    uint32_t options = 0;
    while (offset <= text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), offset, options,
                           data.get(), context.get());
      if (rc == PCRE2_ERROR_NOMATCH) {
        if (options == 0) break;
        // No non-empty match here: move one character on.
        options = 0;
        offset = NextCharacter(text, offset);
        continue;
      }
      if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
          rc == PCRE2_ERROR_HEAPLIMIT) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the pattern needed more than ", match_limit,
            " match steps on this reply (PCRE2's match limit); simplify it"));
      }
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        return absl::InvalidArgumentError(
            absl::StrCat("the pattern failed on this reply: ",
                         reinterpret_cast<const char*>(message)));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      auto group = [&](size_t g) -> absl::string_view {
        const PCRE2_SIZE start = ovector[2 * g];
        if (start == PCRE2_UNSET) return {};
        return text.substr(start, ovector[2 * g + 1] - start);
      };
      std::vector<absl::string_view>& match = matches.emplace_back();
      if (groups_ == 0) {
        match.push_back(group(0));
      } else {
        for (uint32_t g = 1; g <= groups_; ++g) match.push_back(group(g));
      }
      const PCRE2_SIZE start = ovector[0];
      offset = ovector[1];
      // After an empty match, the next one must not be empty at the same
      // place (PCRE2's documented global-match loop).
      options = start == offset ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    }
    return matches;
  }

 private:
  CompiledPattern(pcre2_code* code, uint32_t groups)
      : code_(code), groups_(groups) {}

  // The offset after the UTF-8 character at `offset`.
  static PCRE2_SIZE NextCharacter(absl::string_view text, PCRE2_SIZE offset) {
    ++offset;
    while (offset < text.size() &&
           (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) {
      ++offset;
    }
    return offset;
  }

  pcre2_code* const code_;
  const uint32_t groups_;
};

namespace {

// The UTF-8 length of the whitespace character starting at `p`, or 0.
size_t WhitespaceLength(absl::string_view text, size_t p) {
  const auto byte = [&](size_t i) {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0;
  };
  const unsigned char c = byte(p);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) {
    return 1;
  }
  if (c == 0xC2 && (byte(p + 1) == 0x85 || byte(p + 1) == 0xA0)) return 2;
  if (c == 0xE1 && byte(p + 1) == 0x9A && byte(p + 2) == 0x80) return 3;
  if (c == 0xE2 && byte(p + 1) == 0x80 &&
      (byte(p + 2) <= 0x8A || byte(p + 2) == 0xA8 || byte(p + 2) == 0xA9 ||
       byte(p + 2) == 0xAF) &&
      byte(p + 2) >= 0x80) {
    return 3;
  }
  if (c == 0xE2 && byte(p + 1) == 0x81 && byte(p + 2) == 0x9F) return 3;
  if (c == 0xE3 && byte(p + 1) == 0x80 && byte(p + 2) == 0x80) return 3;
  return 0;
}

std::string Cleaned(absl::string_view value,
                    const std::vector<std::string>& cleanup_tags) {
  std::string cleaned(PythonStrip(value));
  for (const std::string& tag : cleanup_tags) {
    if (!tag.empty()) cleaned = absl::StrReplaceAll(cleaned, {{tag, ""}});
  }
  return cleaned;
}

}  // namespace

absl::string_view PythonStrip(absl::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t length = WhitespaceLength(text, begin);
    if (length == 0) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    // The character ending at `end` starts at most 3 bytes before it.
    size_t length = 0;
    for (size_t back = 1; back <= 3 && back <= end - begin; ++back) {
      if (WhitespaceLength(text, end - back) == back) {
        length = back;
        break;
      }
    }
    if (length == 0) break;
    end -= length;
  }
  return text.substr(begin, end - begin);
}

absl::StatusOr<OutputParser> OutputParser::Tags(
    std::vector<std::string> columns, std::vector<std::string> start_tags,
    std::vector<std::string> end_tags) {
  const size_t pairs =
      std::min({columns.size(), start_tags.size(), end_tags.size()});
  if (pairs == 0) {
    return absl::InvalidArgumentError(
        "the tags parser needs at least one output column with a start tag "
        "and an end tag (both empty: the whole reply)");
  }
  OutputParser parser;
  columns.resize(pairs);
  parser.columns_ = std::move(columns);
  for (size_t i = 0; i < pairs; ++i) {
    parser.tags_.push_back({std::move(start_tags[i]), std::move(end_tags[i])});
  }
  return parser;
}

absl::StatusOr<OutputParser> OutputParser::Pattern(
    std::vector<std::string> columns, absl::string_view pattern,
    std::vector<std::string> cleanup_tags) {
  if (columns.empty()) {
    return absl::InvalidArgumentError(
        "the pattern parser needs at least one output column");
  }
  absl::StatusOr<std::shared_ptr<const CompiledPattern>> compiled =
      CompiledPattern::Compile(pattern);
  if (!compiled.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern ", Quoted(pattern), " ", compiled.status().message()));
  }
  OutputParser parser;
  parser.columns_ = std::move(columns);
  parser.pattern_ = *std::move(compiled);
  parser.cleanup_tags_ = std::move(cleanup_tags);
  return parser;
}

// Never called with two empty tags (Parse takes the whole text then), so
// every turn of the loop moves past a non-empty tag.
std::vector<std::string> OutputParser::ParseTagPair(
    const TagPair& pair, absl::string_view text) const {
  std::vector<std::string> values;
  size_t offset = 0;
  while (offset <= text.size()) {
    const size_t start = text.find(pair.start, offset);
    if (start == absl::string_view::npos) break;
    const size_t value_begin = start + pair.start.size();
    const size_t end = text.find(pair.end, value_begin);
    if (end == absl::string_view::npos) break;
    values.emplace_back(
        PythonStrip(text.substr(value_begin, end - value_begin)));
    offset = end + pair.end.size();
  }
  return values;
}

absl::StatusOr<std::vector<ParsedValues>> OutputParser::Parse(
    absl::string_view text) const {
  if (pattern_ != nullptr) return ParsePattern(text);
  // One list of values per column, then zipped into rows.
  std::vector<std::vector<std::optional<std::string>>> by_column;
  size_t rows = std::string::npos;
  for (const TagPair& pair : tags_) {
    std::vector<std::optional<std::string>>& values = by_column.emplace_back();
    if (pair.start.empty() && pair.end.empty()) {
      // LLMBlock: `text.strip() if text else None`.
      if (text.empty()) {
        values.emplace_back(std::nullopt);
      } else {
        values.emplace_back(std::string(PythonStrip(text)));
      }
    } else {
      for (std::string& value : ParseTagPair(pair, text)) {
        values.emplace_back(std::move(value));
      }
    }
    rows = std::min(rows, values.size());
  }
  std::vector<ParsedValues> parsed(rows);
  for (size_t r = 0; r < rows; ++r) {
    for (auto& values : by_column) parsed[r].push_back(std::move(values[r]));
  }
  return parsed;
}

absl::StatusOr<std::vector<ParsedValues>> OutputParser::ParsePattern(
    absl::string_view text) const {
  absl::StatusOr<std::vector<std::vector<absl::string_view>>> matches =
      pattern_->FindAll(text, kMatchLimit);
  if (!matches.ok()) return matches.status();
  std::vector<ParsedValues> parsed;
  if (pattern_->groups() >= 2) {
    // zip(columns, groups): the shorter decides; a column without a group
    // has no value, so no row at all (zip of lists of unequal length).
    if (columns_.size() > pattern_->groups()) return parsed;
    for (const auto& match : *matches) {
      ParsedValues& row = parsed.emplace_back();
      for (size_t c = 0; c < columns_.size(); ++c) {
        row.emplace_back(Cleaned(match[c], cleanup_tags_));
      }
    }
    return parsed;
  }
  // One group or none: the first column only; any other column has no
  // values, and then there is no row.
  if (columns_.size() > 1) return parsed;
  for (const auto& match : *matches) {
    parsed.push_back({std::string(PythonStrip(match[0]))});
  }
  return parsed;
}

}  // namespace sdg
