// A job's input rows, stored once when the job is admitted and read a shard
// at a time when its shards run, so that sdgd's memory does not grow with
// the size of its datasets.
//
// On disk a dataset is two files in one directory: rows.bin, the rows as
// serialized google.protobuf.Struct messages one after another, and
// rows.idx, row_count + 1 little-endian uint64 offsets into rows.bin. A
// builder writes them as *.tmp and renames them when it finishes, so a
// dataset on disk is always whole.
#ifndef SDG_SERVER_JOBS_DATASET_H_
#define SDG_SERVER_JOBS_DATASET_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace simdjson::dom {
class parser;
}  // namespace simdjson::dom

namespace sdg {

// What a builder learnt of its rows; enough to validate a job against the
// dataset without reading it again.
struct DatasetInfo {
  int64_t rows = 0;
  // Every column some row has, with the first row that lacks it (-1: every
  // row has it).
  std::map<std::string, int64_t> columns;

  // The first row that lacks `column` (0 if no row has it), or nullopt.
  std::optional<int64_t> FirstRowMissing(const std::string& column) const;
  // Counts one more row.
  void Add(const google::protobuf::Struct& row);
  // As JSON ({"rows": N, "columns": {...}}), to be stored beside the rows.
  std::string ToJson() const;
  static absl::StatusOr<DatasetInfo> FromJson(absl::string_view json);
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t row_count() const = 0;
  // Rows [first, first + count); safe to call from several threads.
  virtual absl::StatusOr<std::vector<google::protobuf::Struct>> ReadRows(
      int64_t first, int64_t count) const = 0;
  // The same rows as stored, each a serialized google.protobuf.Struct, for
  // a reader that needs less than the whole Struct (a Batch API file's
  // download takes each row's line as it is: EncodedRowLine).
  using EncodedRowFn = absl::FunctionRef<absl::Status(absl::string_view)>;
  virtual absl::Status ReadEncodedRows(int64_t first, int64_t count,
                                       EncodedRowFn on_row) const = 0;

  // A dataset a builder wrote into `dir`.
  static absl::StatusOr<std::shared_ptr<Dataset>> OpenDirectory(
      const std::string& dir);
};

class DatasetBuilder {
 public:
  virtual ~DatasetBuilder() = default;
  // Rows kept in memory (ephemeral servers, tests).
  static std::unique_ptr<DatasetBuilder> InMemory();
  // rows.bin and rows.idx in `dir`, which must exist.
  static absl::StatusOr<std::unique_ptr<DatasetBuilder>> InDirectory(
      std::string dir);

  virtual absl::Status Add(const google::protobuf::Struct& row) = 0;
  // A row as a serialized google.protobuf.Struct; INVALID_ARGUMENT if it is
  // not one.
  absl::Status AddSerialized(absl::string_view row);
  // Makes the dataset durable (files synced and renamed) and opens it.
  virtual absl::StatusOr<std::shared_ptr<Dataset>> Finish() = 0;
  const DatasetInfo& info() const { return info_; }

 protected:
  DatasetInfo info_;

 private:
  google::protobuf::Struct parsed_;  // reused by AddSerialized
};

// Splits JSON-lines text, fed in chunks of any size, into rows. Blank lines
// are skipped. Errors are INVALID_ARGUMENT naming the line:
// `line 3: not a JSON object (...)`.
class JsonLinesDecoder {
 public:
  using RowFn = absl::FunctionRef<absl::Status(google::protobuf::Struct)>;
  JsonLinesDecoder();
  ~JsonLinesDecoder();

  absl::Status Feed(absl::string_view data, RowFn on_row);
  // The last line, if the text does not end with a newline.
  absl::Status Finish(RowFn on_row);
  int64_t bytes() const { return bytes_; }

  // Lines longer than this are refused (a guard against a file that is not
  // JSON lines at all).
  static constexpr size_t kMaxLineBytes = 64 << 20;

 private:
  absl::Status Decode(absl::string_view line, RowFn on_row);

  // simdjson's parser: its buffers are reused from line to line.
  std::unique_ptr<simdjson::dom::parser> parser_;
  std::string partial_;
  int64_t line_number_ = 0;
  int64_t bytes_ = 0;
};

// Reads a JSON-lines file under `path` into `builder`; errors name the path.
absl::Status ImportJsonLinesFile(const std::string& path,
                                 DatasetBuilder& builder);
// The same, a row at a time into `on_row`, keeping none. An error from
// `on_row` ends the reading; INVALID_ARGUMENT comes back naming the path
// and line, any other as it is.
absl::Status ReadJsonLinesFile(const std::string& path,
                               JsonLinesDecoder::RowFn on_row);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_DATASET_H_
