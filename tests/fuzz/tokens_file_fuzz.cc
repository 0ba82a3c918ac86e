// --auth_tokens_file's text, as sdgd parses it at start and on each change.
#include <cstddef>
#include <cstdint>

#include "server/api/tokens_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sdg::ParseTokensFile(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
