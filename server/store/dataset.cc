#include "server/store/dataset.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/store/file_util.h"

namespace sdg {
namespace {

constexpr char kRowsFile[] = "rows.bin";
constexpr char kIndexFile[] = "rows.idx";
constexpr size_t kWriteBuffer = 1 << 20;

std::string PathIn(const std::string& dir, const char* name) {
  return absl::StrCat(dir, "/", name);
}

// OUT_OF_RANGE unless rows [first, first + count) are among `rows`.
absl::Status CheckRange(int64_t first, int64_t count, int64_t rows) {
  if (first < 0 || count < 0 || first + count > rows) {
    return absl::OutOfRangeError(
        absl::StrCat("rows ", first, "+", count, " of ", rows));
  }
  return absl::OkStatus();
}

class MemoryDataset final : public Dataset {
 public:
  explicit MemoryDataset(std::vector<google::protobuf::Struct> rows)
      : rows_(std::move(rows)) {}
  int64_t row_count() const override {
    return static_cast<int64_t>(rows_.size());
  }
  absl::StatusOr<std::vector<google::protobuf::Struct>> ReadRows(
      int64_t first, int64_t count) const override {
    SDG_RETURN_IF_ERROR(CheckRange(first, count, row_count()));
    return std::vector<google::protobuf::Struct>(rows_.begin() + first,
                                                 rows_.begin() + first + count);
  }
  absl::Status ReadEncodedRows(int64_t first, int64_t count,
                               EncodedRowFn on_row) const override {
    SDG_RETURN_IF_ERROR(CheckRange(first, count, row_count()));
    std::string encoded;
    for (int64_t i = first; i < first + count; ++i) {
      encoded.clear();
      rows_[i].AppendToString(&encoded);
      SDG_RETURN_IF_ERROR(on_row(encoded));
    }
    return absl::OkStatus();
  }

 private:
  const std::vector<google::protobuf::Struct> rows_;
};

class FileDataset final : public Dataset {
 public:
  FileDataset(std::string dir, UniqueFd rows, UniqueFd index, int64_t row_count)
      : dir_(std::move(dir)),
        rows_(std::move(rows)),
        index_(std::move(index)),
        row_count_(row_count) {}

  int64_t row_count() const override { return row_count_; }

  absl::StatusOr<std::vector<google::protobuf::Struct>> ReadRows(
      int64_t first, int64_t count) const override {
    std::vector<google::protobuf::Struct> rows;
    rows.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
    SDG_RETURN_IF_ERROR(
        ReadEncodedRows(first, count, [&](absl::string_view encoded) {
          if (!rows.emplace_back().ParseFromArray(
                  encoded.data(), static_cast<int>(encoded.size()))) {
            return Damaged(PathIn(dir_, kRowsFile));
          }
          return absl::OkStatus();
        }));
    return rows;
  }

  absl::Status ReadEncodedRows(int64_t first, int64_t count,
                               EncodedRowFn on_row) const override {
    SDG_RETURN_IF_ERROR(CheckRange(first, count, row_count_));
    const std::string index_path = PathIn(dir_, kIndexFile);
    std::vector<uint64_t> offsets(static_cast<size_t>(count) + 1);
    const size_t index_bytes = offsets.size() * sizeof(uint64_t);
    absl::StatusOr<size_t> read =
        ReadAt(index_.get(), first * sizeof(uint64_t), index_bytes,
               reinterpret_cast<char*>(offsets.data()), index_path);
    if (!read.ok()) return read.status();
    if (*read != index_bytes) return Damaged(index_path);
    for (uint64_t& offset : offsets) offset = le64toh(offset);
    if (offsets.back() < offsets.front()) return Damaged(index_path);

    const std::string rows_path = PathIn(dir_, kRowsFile);
    std::string bytes(offsets.back() - offsets.front(), '\0');
    read = ReadAt(rows_.get(), static_cast<int64_t>(offsets.front()),
                  bytes.size(), bytes.data(), rows_path);
    if (!read.ok()) return read.status();
    if (*read != bytes.size()) return Damaged(rows_path);
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t begin = offsets[i] - offsets.front();
      const uint64_t end = offsets[i + 1] - offsets.front();
      if (end < begin) return Damaged(rows_path);
      SDG_RETURN_IF_ERROR(
          on_row(absl::string_view(bytes).substr(begin, end - begin)));
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status Damaged(const std::string& path) {
    return absl::DataLossError(
        absl::StrCat(path, " is damaged (shorter than its index says)"));
  }

  const std::string dir_;
  const UniqueFd rows_;
  const UniqueFd index_;
  const int64_t row_count_;
};

class MemoryDatasetBuilder final : public DatasetBuilder {
 public:
  absl::Status Add(const google::protobuf::Struct& row) override {
    info_.Add(row);
    rows_.push_back(row);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<Dataset>> Finish() override {
    return std::make_shared<MemoryDataset>(std::move(rows_));
  }

 private:
  std::vector<google::protobuf::Struct> rows_;
};

class FileDatasetBuilder final : public DatasetBuilder {
 public:
  FileDatasetBuilder(std::string dir, UniqueFd rows, UniqueFd index)
      : dir_(std::move(dir)), rows_(std::move(rows)), index_(std::move(index)) {
    AppendOffset();
  }

  absl::Status Add(const google::protobuf::Struct& row) override {
    info_.Add(row);
    if (!row.AppendToString(&rows_buffer_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", info_.rows - 1, " cannot be serialized"));
    }
    offset_ = written_ + rows_buffer_.size();
    AppendOffset();
    if (rows_buffer_.size() >= kWriteBuffer) return FlushBuffers();
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Dataset>> Finish() override {
    if (absl::Status s = FlushBuffers(); !s.ok()) return s;
    for (const auto& [fd, name] : {std::pair(rows_.get(), kRowsFile),
                                   std::pair(index_.get(), kIndexFile)}) {
      std::string path = PathIn(dir_, name);
      if (::fdatasync(fd) != 0) return FileError("fsync", path + ".tmp", errno);
      if (::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
        return FileError("rename", path + ".tmp", errno);
      }
    }
    if (absl::Status s = SyncDirectory(dir_); !s.ok()) return s;
    return Dataset::OpenDirectory(dir_);
  }

 private:
  void AppendOffset() {
    uint64_t le = htole64(offset_);
    index_buffer_.append(reinterpret_cast<const char*>(&le), sizeof(le));
  }
  absl::Status FlushBuffers() {
    if (absl::Status s = WriteAll(rows_.get(), rows_buffer_,
                                  PathIn(dir_, kRowsFile) + ".tmp");
        !s.ok()) {
      return s;
    }
    written_ += rows_buffer_.size();
    rows_buffer_.clear();
    if (absl::Status s = WriteAll(index_.get(), index_buffer_,
                                  PathIn(dir_, kIndexFile) + ".tmp");
        !s.ok()) {
      return s;
    }
    index_buffer_.clear();
    return absl::OkStatus();
  }

  const std::string dir_;
  UniqueFd rows_;
  UniqueFd index_;
  std::string rows_buffer_;
  std::string index_buffer_;
  uint64_t written_ = 0;
  uint64_t offset_ = 0;
};

}  // namespace

std::optional<int64_t> DatasetInfo::FirstRowMissing(
    const std::string& column) const {
  auto it = columns.find(column);
  if (it == columns.end()) return 0;
  if (it->second < 0) return std::nullopt;
  return it->second;
}

void DatasetInfo::Add(const google::protobuf::Struct& row) {
  const int64_t index = rows++;
  for (auto& [column, first_missing] : columns) {
    if (first_missing < 0 && !row.fields().contains(column)) {
      first_missing = index;
    }
  }
  for (const auto& [column, value] : row.fields()) {
    // A column first seen after row 0 is missing from row 0.
    columns.try_emplace(column, index == 0 ? -1 : 0);
  }
}

std::string DatasetInfo::ToJson() const {
  nlohmann::json json;
  json["rows"] = rows;
  json["columns"] = nlohmann::json::object();
  for (const auto& [column, first_missing] : columns) {
    json["columns"][column] = first_missing;
  }
  return json.dump();
}

absl::StatusOr<DatasetInfo> DatasetInfo::FromJson(absl::string_view text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object() ||
      !json["rows"].is_number_integer() || !json["columns"].is_object()) {
    return absl::DataLossError("dataset description is not valid");
  }
  DatasetInfo info;
  info.rows = json["rows"].get<int64_t>();
  for (const auto& [column, first_missing] : json["columns"].items()) {
    info.columns[column] = first_missing.get<int64_t>();
  }
  return info;
}

absl::StatusOr<std::shared_ptr<Dataset>> Dataset::OpenDirectory(
    const std::string& dir) {
  std::string rows_path = PathIn(dir, kRowsFile);
  std::string index_path = PathIn(dir, kIndexFile);
  UniqueFd rows(::open(rows_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (rows.get() < 0) return FileError("open", rows_path, errno);
  UniqueFd index(::open(index_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (index.get() < 0) return FileError("open", index_path, errno);
  off_t size = ::lseek(index.get(), 0, SEEK_END);
  if (size < static_cast<off_t>(sizeof(uint64_t)) ||
      size % sizeof(uint64_t) != 0) {
    return absl::DataLossError(absl::StrCat(index_path, " is damaged"));
  }
  return std::make_shared<FileDataset>(
      dir, std::move(rows), std::move(index),
      static_cast<int64_t>(size / sizeof(uint64_t)) - 1);
}

std::unique_ptr<DatasetBuilder> DatasetBuilder::InMemory() {
  return std::make_unique<MemoryDatasetBuilder>();
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> DatasetBuilder::InDirectory(
    std::string dir) {
  std::string rows_path = PathIn(dir, kRowsFile) + ".tmp";
  std::string index_path = PathIn(dir, kIndexFile) + ".tmp";
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  UniqueFd rows(::open(rows_path.c_str(), kFlags, 0644));
  if (rows.get() < 0) return FileError("create", rows_path, errno);
  UniqueFd index(::open(index_path.c_str(), kFlags, 0644));
  if (index.get() < 0) return FileError("create", index_path, errno);
  return std::make_unique<FileDatasetBuilder>(std::move(dir), std::move(rows),
                                              std::move(index));
}

absl::Status JsonLinesDecoder::Feed(absl::string_view data, RowFn on_row) {
  bytes_ += static_cast<int64_t>(data.size());
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (newline == absl::string_view::npos) {
      partial_.append(data.data(), data.size());
      if (partial_.size() > kMaxLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_number_ + 1, ": longer than ",
                         kMaxLineBytes >> 20, " MiB"));
      }
      return absl::OkStatus();
    }
    absl::Status decoded;
    if (partial_.empty()) {
      decoded = Decode(data.substr(0, newline), on_row);
    } else {
      partial_.append(data.data(), newline);
      decoded = Decode(partial_, on_row);
      partial_.clear();
    }
    if (!decoded.ok()) return decoded;
    data.remove_prefix(newline + 1);
  }
  return absl::OkStatus();
}

absl::Status JsonLinesDecoder::Finish(RowFn on_row) {
  if (partial_.empty()) return absl::OkStatus();
  std::string last = std::move(partial_);
  partial_.clear();
  return Decode(last, on_row);
}

namespace {

// A row's nesting, in objects and arrays. An object in an object is three
// protobuf messages (the map entry, its Value, the Struct), and a serialized
// row must parse again under protobuf's limit of 100.
constexpr int kMaxRowDepth = 32;

const char* KindOf(simdjson::dom::element_type type) {
  using Type = simdjson::dom::element_type;
  switch (type) {
    case Type::ARRAY:
      return "an array";
    case Type::OBJECT:
      return "an object";
    case Type::STRING:
      return "a string";
    case Type::BOOL:
      return "a boolean";
    case Type::NULL_VALUE:
      return "null";
    default:
      return "a number";
  }
}

absl::Status FillStruct(simdjson::dom::object object,
                        google::protobuf::Struct& out, int depth);

// `element` (at nesting `depth`) into `out`.
absl::Status FillValue(simdjson::dom::element element,
                       google::protobuf::Value& out, int depth) {
  using Type = simdjson::dom::element_type;
  const Type type = element.type();
  if ((type == Type::ARRAY || type == Type::OBJECT) && depth >= kMaxRowDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("nested deeper than ", kMaxRowDepth, " levels"));
  }
  switch (type) {
    case Type::OBJECT:
      return FillStruct(element.get_object().value_unsafe(),
                        *out.mutable_struct_value(), depth + 1);
    case Type::ARRAY: {
      google::protobuf::ListValue& list = *out.mutable_list_value();
      const simdjson::dom::array items = element.get_array().value_unsafe();
      for (simdjson::dom::element item : items) {
        if (absl::Status s = FillValue(item, *list.add_values(), depth + 1);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    }
    case Type::STRING: {
      const std::string_view text = element.get_string().value_unsafe();
      out.set_string_value(text.data(), text.size());
      return absl::OkStatus();
    }
    case Type::INT64:
      out.set_number_value(
          static_cast<double>(element.get_int64().value_unsafe()));
      return absl::OkStatus();
    case Type::UINT64:
      out.set_number_value(
          static_cast<double>(element.get_uint64().value_unsafe()));
      return absl::OkStatus();
    case Type::DOUBLE:
      out.set_number_value(element.get_double().value_unsafe());
      return absl::OkStatus();
    case Type::BOOL:
      out.set_bool_value(element.get_bool().value_unsafe());
      return absl::OkStatus();
    case Type::NULL_VALUE:
      out.set_null_value(google::protobuf::NULL_VALUE);
      return absl::OkStatus();
  }
  return absl::InternalError("unknown JSON element type");
}

absl::Status FillStruct(simdjson::dom::object object,
                        google::protobuf::Struct& out, int depth) {
  auto& fields = *out.mutable_fields();
  for (simdjson::dom::key_value_pair field : object) {
    google::protobuf::Value& value =
        fields[std::string(field.key.data(), field.key.size())];
    value.Clear();  // a repeated key: the last one counts, as in JSON.parse
    if (absl::Status s = FillValue(field.value, value, depth); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

JsonLinesDecoder::JsonLinesDecoder()
    : parser_(std::make_unique<simdjson::dom::parser>()) {}

JsonLinesDecoder::~JsonLinesDecoder() = default;

absl::Status JsonLinesDecoder::Decode(absl::string_view line, RowFn on_row) {
  ++line_number_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == absl::string_view::npos) {
    return absl::OkStatus();
  }
  auto not_a_row = [this](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line_number_, ": not a JSON object (", why, ")"));
  };
  // simdjson reads past the end of its input: it copies the line into its
  // own padded buffer (realloc_if_needed).
  simdjson::dom::element document;
  if (simdjson::error_code error =
          parser_->parse(line.data(), line.size(), true).get(document);
      error != simdjson::SUCCESS) {
    return not_a_row(simdjson::error_message(error));
  }
  if (document.type() != simdjson::dom::element_type::OBJECT) {
    return not_a_row(absl::StrCat("got ", KindOf(document.type())));
  }
  google::protobuf::Struct row;
  if (absl::Status s = FillStruct(document.get_object().value_unsafe(), row, 1);
      !s.ok()) {
    return not_a_row(s.message());
  }
  return on_row(std::move(row));
}

absl::Status DatasetBuilder::AddSerialized(absl::string_view row) {
  if (!parsed_.ParseFromArray(row.data(), static_cast<int>(row.size()))) {
    return absl::InvalidArgumentError(
        "not a valid google.protobuf.Struct (is a string not UTF-8, or are "
        "values nested deeper than 100 levels?)");
  }
  return Add(parsed_);
}

absl::Status ReadJsonLinesFile(const std::string& path,
                               JsonLinesDecoder::RowFn on_row) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset_path: cannot open ", path, ": ", std::strerror(errno)));
  }
  JsonLinesDecoder decoder;
  std::string buffer(kWriteBuffer, '\0');
  int64_t offset = 0;
  while (true) {
    absl::StatusOr<size_t> read =
        ReadAt(fd.get(), offset, buffer.size(), buffer.data(), path);
    if (!read.ok()) return read.status();
    if (*read == 0) break;
    offset += static_cast<int64_t>(*read);
    absl::Status fed =
        decoder.Feed(absl::string_view(buffer.data(), *read), on_row);
    if (fed.code() != absl::StatusCode::kInvalidArgument) {
      if (fed.ok()) continue;
      return fed;  // the store's error, not the file's
    }
    {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset_path ", path, ": ", fed.message()));
    }
  }
  if (absl::Status s = decoder.Finish(on_row); !s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument) return s;
    return absl::InvalidArgumentError(
        absl::StrCat("dataset_path ", path, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status ImportJsonLinesFile(const std::string& path,
                                 DatasetBuilder& builder) {
  return ReadJsonLinesFile(path,
                           [&builder](const google::protobuf::Struct& row) {
                             return builder.Add(row);
                           });
}

}  // namespace sdg
