#include "tools/llmsim/reply_book.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace sdg::llmsim {

absl::StatusOr<ReplyBook> ReplyBook::Parse(absl::string_view contents) {
  ReplyBook book;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("replies line ", line_number, ": ", why));
    };
    nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    if (entry.is_discarded() || !entry.is_object()) {
      return bad("not a JSON object");
    }
    auto match = entry.find("match");
    auto reply = entry.find("reply");
    if (reply == entry.end() || !reply->is_string()) {
      return bad("\"reply\" must be a string");
    }
    Entry parsed;
    parsed.reply = reply->get<std::string>();
    if (match != entry.end() && match->is_string()) {
      parsed.substrings.push_back(match->get<std::string>());
    } else if (match != entry.end() && match->is_array()) {
      for (const nlohmann::json& item : *match) {
        if (!item.is_string()) return bad("\"match\" items must be strings");
        parsed.substrings.push_back(item.get<std::string>());
      }
    } else {
      return bad("\"match\" must be a string or a list of strings");
    }
    book.entries_.push_back(std::move(parsed));
  }
  return book;
}

absl::StatusOr<ReplyBook> ReplyBook::Load(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read --replies ", path));
  }
  std::stringstream contents;
  contents << file.rdbuf();
  absl::StatusOr<ReplyBook> book = Parse(contents.str());
  if (!book.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", book.status().message()));
  }
  return book;
}

namespace {

// FNV-1a of the request's texts, 8 hex digits: replies that differ by
// prompt, the same for the same prompt in every run.
std::string PromptHash(absl::Span<const absl::string_view> texts) {
  uint32_t hash = 2166136261u;
  for (absl::string_view text : texts) {
    for (unsigned char c : text) hash = (hash ^ c) * 16777619u;
  }
  return absl::StrFormat("%08x", hash);
}

}  // namespace

std::optional<std::string> ReplyBook::Find(
    absl::Span<const absl::string_view> texts, int sample_index) const {
  for (const Entry& entry : entries_) {
    bool matches = true;
    for (const std::string& substring : entry.substrings) {
      bool found = false;
      for (absl::string_view text : texts) {
        if (absl::StrContains(text, substring)) {
          found = true;
          break;
        }
      }
      if (!found) {
        matches = false;
        break;
      }
    }
    if (matches) {
      return absl::StrReplaceAll(entry.reply,
                                 {{"{{i}}", absl::StrCat(sample_index)},
                                  {"{{prompt_hash}}", PromptHash(texts)}});
    }
  }
  return std::nullopt;
}

}  // namespace sdg::llmsim
