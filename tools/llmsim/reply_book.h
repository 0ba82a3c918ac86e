// llmsim's canned replies (--replies FILE), for pipelines whose parsers
// expect replies of a certain shape. The file is JSON lines:
//   {"match": "<substring>" or ["<substring>", ...], "reply": "<text>"}
// A line matches a request when each of its substrings appears in the
// prompt (for chat, in some message's content); the first line that matches
// gives the reply, with "{{i}}" replaced by the sample index, so that n > 1
// gives distinct replies, and "{{prompt_hash}}" by 8 hex digits of a hash
// of the prompt, so that different prompts get different replies. A request no
// line matches gets the echo reply.
#ifndef SDG_TESTS_LLMSIM_REPLY_BOOK_H_
#define SDG_TESTS_LLMSIM_REPLY_BOOK_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace sdg::llmsim {

class ReplyBook {
 public:
  // Errors name the line and what is wrong with it.
  static absl::StatusOr<ReplyBook> Parse(absl::string_view contents);
  static absl::StatusOr<ReplyBook> Load(const std::string& path);

  // The reply for sample `sample_index` of a request whose texts (the
  // prompt, or every message's content) are `texts`; nullopt when no line
  // matches.
  std::optional<std::string> Find(absl::Span<const absl::string_view> texts,
                                  int sample_index) const;

 private:
  struct Entry {
    std::vector<std::string> substrings;
    std::string reply;
  };
  std::vector<Entry> entries_;
};

}  // namespace sdg::llmsim

#endif  // SDG_TESTS_LLMSIM_REPLY_BOOK_H_
