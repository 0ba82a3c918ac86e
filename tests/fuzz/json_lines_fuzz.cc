// JSON lines, both readers: sdgctl's (ReadJsonlRows, from a file) and the
// server's streaming decoder (UploadDataset's chunks), the text cut into two
// chunks at a point the input chooses.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "client/row_json.h"
#include "server/store/dataset.h"

namespace {

// The file sdgctl's reader reads, removed when the fuzzer exits (libFuzzer
// ends with exit(), which runs static destructors).
class Scratch {
 public:
  Scratch()
      : path_("/tmp/sdg-json-lines-fuzz-" + std::to_string(::getpid()) +
              ".jsonl") {}
  ~Scratch() { ::unlink(path_.c_str()); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
};

const std::string& ScratchFile() {
  static const Scratch scratch;
  return scratch.path();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  {
    std::ofstream(ScratchFile(), std::ios::trunc | std::ios::binary)
        .write(text.data(), static_cast<std::streamsize>(text.size()));
    absl::StatusOr<std::vector<sdg::JsonRow>> rows =
        sdg::ReadJsonlRows(ScratchFile());
    if (rows.ok()) {
      for (const sdg::JsonRow& row : *rows) (void)sdg::JsonToStruct(row);
    }
  }
  const size_t cut = text.empty() ? 0 : data[0] % (text.size() + 1);
  sdg::JsonLinesDecoder decoder;
  auto keep = [](google::protobuf::Struct /*row*/) { return absl::OkStatus(); };
  if (decoder.Feed(text.substr(0, cut), keep).ok() &&
      decoder.Feed(text.substr(cut), keep).ok()) {
    (void)decoder.Finish(keep);
  }
  return 0;
}
