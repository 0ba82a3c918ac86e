// JSON for many small documents (a backend's requests and replies, a batch
// file's lines): simdjson's DOM parser, one per thread, each parse going
// into the thread's tape rather than allocated nodes, the parser keeping
// its buffers from one document to the next (up to kKeptCapacity); and
// strings written straight into the text being built.
#ifndef SDG_BASE_JSON_H_
#define SDG_BASE_JSON_H_

#include <simdjson.h>

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace sdg {

// The thread's parser, for one parse: what it parsed stays valid until this
// goes, and then a parser grown past kKeptCapacity is let go. One at a time
// on a thread.
class ThreadJsonParser {
 public:
  static constexpr size_t kKeptCapacity = 1 << 20;

  ThreadJsonParser() = default;
  ThreadJsonParser(const ThreadJsonParser&) = delete;
  ThreadJsonParser& operator=(const ThreadJsonParser&) = delete;
  ~ThreadJsonParser();

  simdjson::error_code Parse(absl::string_view text,
                             simdjson::dom::element& out);

 private:
  static thread_local simdjson::dom::parser parser_;
};

// Appends `text` as a JSON string, quoted and escaped. Bytes that are not
// UTF-8 become U+FFFD.
void AppendJsonString(absl::string_view text, std::string& out);

// `text` as a JSON string.
std::string JsonString(absl::string_view text);

}  // namespace sdg

#endif  // SDG_BASE_JSON_H_
