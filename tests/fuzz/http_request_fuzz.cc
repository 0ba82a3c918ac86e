// A request as the Batch API's HTTP port reads it off the wire: the head
// (up to the first empty line), then its body by Content-Length or chunks.
// The first input byte says how the body bytes are cut into reads; however
// they are cut, the body and what follows it must come out the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/api/http_request_parser.h"

namespace {

struct Outcome {
  bool ok = false;
  std::string body;
  size_t used = 0;
};

Outcome Decode(const sdg::HttpRequestHead& head, absl::string_view wire,
               size_t step) {
  Outcome outcome;
  auto decoder = sdg::HttpBodyDecoder::For(head, 1 << 16);
  if (!decoder.ok()) return outcome;
  while (outcome.used < wire.size() && !decoder->done()) {
    const absl::string_view piece = wire.substr(outcome.used, step);
    auto used = decoder->Decode(piece, outcome.body);
    if (!used.ok()) return outcome;
    if (*used > piece.size()) abort();
    outcome.used += *used;
    if (*used < piece.size() && !decoder->done()) abort();
  }
  outcome.ok = decoder->done();
  return outcome;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  const size_t end = input.find("\r\n\r\n");
  if (end == absl::string_view::npos) return 0;
  auto head = sdg::ParseRequestHead(input.substr(0, end + 4));
  if (!head.ok()) {
    (void)sdg::HttpStatusOfParseError(head.status());
    return 0;
  }
  (void)head->KeepAlive();
  (void)head->ExpectsContinue();
  const absl::string_view wire = input.substr(end + 4);
  const Outcome whole = Decode(*head, wire, wire.size() + 1);
  const Outcome cut = Decode(*head, wire, 1 + data[0] % 32);
  if (whole.ok != cut.ok) abort();
  if (whole.ok && (whole.body != cut.body || whole.used != cut.used)) abort();
  return 0;
}
