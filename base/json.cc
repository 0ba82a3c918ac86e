#include "base/json.h"

#include <nlohmann/json.hpp>

namespace sdg {

thread_local simdjson::dom::parser ThreadJsonParser::parser_;

ThreadJsonParser::~ThreadJsonParser() {
  if (parser_.capacity() > kKeptCapacity) parser_ = simdjson::dom::parser();
}

simdjson::error_code ThreadJsonParser::Parse(absl::string_view text,
                                             simdjson::dom::element& out) {
  return parser_.parse(text.data(), text.size(), /*realloc_if_needed=*/true)
      .get(out);
}

// Request bodies are written straight into one string rather than built as
// a JSON DOM and dumped: the prompt is most of a body, and nlohmann's
// escaping went through it a byte at a time (6.6 % of sdgd's CPU with 3 KB
// rows; bench/README.md).
void AppendJsonString(absl::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  // RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
  if (!simdjson::validate_utf8(text.data(), text.size())) {
    // Not reached from requests (protobuf strings are UTF-8), but a body
    // must stay JSON whatever it carries: invalid bytes become U+FFFD, as
    // nlohmann's replace handler writes them.
    out.append(
        nlohmann::json(std::string(text))
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  out.push_back('"');
  size_t run = 0;  // start of the bytes not yet appended
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xf]);
    }
  }
  out.append(text.data() + run, text.size() - run);
  out.push_back('"');
}

std::string JsonString(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  AppendJsonString(text, out);
  return out;
}

}  // namespace sdg
