#include "server/api/batch_api.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "server/api/multipart.h"

namespace sdg {
namespace {

using Json = nlohmann::ordered_json;

// OpenAI's limits on a batch's metadata.
constexpr size_t kMaxMetadataKeys = 16;
constexpr size_t kMaxMetadataKeyChars = 64;
constexpr size_t kMaxMetadataValueChars = 512;
// A request that is not a file upload is a small JSON object.
constexpr size_t kMaxJsonBodyBytes = 1 << 20;

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

ApiResponse JsonResponse(int status, const Json& json) {
  ApiResponse response;
  response.status = status;
  response.body = json.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

// OpenAI's error object; `param` names the field when there is one.
ApiResponse ErrorResponse(const absl::Status& status,
                          absl::string_view param = "") {
  const int http = HttpStatusOf(status.code());
  Json error = {
      {"message", std::string(status.message())},
      {"type", http == 401  ? "invalid_request_error"
               : http < 500 ? "invalid_request_error"
                            : "server_error"},
      {"param", param.empty() ? Json(nullptr) : Json(std::string(param))},
      {"code", http == 401   ? Json("invalid_api_key")
               : http == 404 ? Json("not_found")
                             : Json(nullptr)}};
  return JsonResponse(http, Json{{"error", std::move(error)}});
}

// The query's parameters (values percent-decoded; ids and numbers need no
// more).
std::map<std::string, std::string> QueryParameters(absl::string_view query) {
  std::map<std::string, std::string> parameters;
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t equals = pair.find('=');
    std::string value;
    const absl::string_view raw =
        equals == absl::string_view::npos ? "" : pair.substr(equals + 1);
    for (size_t i = 0; i < raw.size(); ++i) {
      int byte = 0;
      if (raw[i] == '%' && i + 2 < raw.size() + 0 &&
          absl::SimpleHexAtoi(raw.substr(i + 1, 2), &byte)) {
        value.push_back(static_cast<char>(byte));
        i += 2;
      } else {
        value.push_back(raw[i] == '+' ? ' ' : raw[i]);
      }
    }
    parameters[std::string(pair.substr(0, equals))] = std::move(value);
  }
  return parameters;
}

// A `limit` parameter from 1 to `most`, `fallback` when absent.
absl::StatusOr<int> Limit(const std::map<std::string, std::string>& query,
                          int fallback, int most) {
  auto it = query.find("limit");
  if (it == query.end()) return fallback;
  int limit = 0;
  if (!absl::SimpleAtoi(it->second, &limit) || limit < 1 || limit > most) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: must be a number from 1 to ", most));
  }
  return limit;
}

Json Seconds(absl::Time time) {
  if (time == absl::InfinitePast() || time == absl::InfiniteFuture()) {
    return nullptr;
  }
  return absl::ToUnixSeconds(time);
}

absl::Time TimeOf(const google::protobuf::Timestamp& timestamp) {
  if (timestamp.seconds() == 0 && timestamp.nanos() == 0) {
    return absl::InfinitePast();
  }
  return absl::FromUnixSeconds(timestamp.seconds()) +
         absl::Nanoseconds(timestamp.nanos());
}

Json FileObject(const StoredDataset& file, absl::Duration retention) {
  return {{"id", file.dataset.dataset_id()},
          {"object", "file"},
          {"bytes", file.dataset.bytes()},
          {"created_at", absl::ToUnixSeconds(file.create_time)},
          {"filename", file.dataset.filename()},
          {"purpose", file.dataset.purpose()},
          {"status", "processed"},
          {"expires_at", absl::ToUnixSeconds(std::min(
                             file.create_time + retention, file.expire_time))},
          {"status_details", nullptr}};
}

std::string BatchStatus(const BatchView& view) {
  // An ended batch whose files are not written yet is still finalizing
  // (or cancelling): a client that sees it ended downloads its files.
  const bool written = view.files_written;
  switch (view.job.state()) {
    case v1::JOB_STATE_SUCCEEDED:
      return written ? "completed" : "finalizing";
    case v1::JOB_STATE_FAILED:
      if (!view.line_errors.empty()) return "failed";
      if (!written) return "finalizing";
      return view.expired ? "expired" : "failed";
    case v1::JOB_STATE_CANCELLED:
      return written ? "cancelled" : "cancelling";
    default:
      return view.cancelling ? "cancelling" : "in_progress";
  }
}

Json BatchObject(const BatchView& view) {
  const v1::Job& job = view.job;
  const v1::OpenAIBatch& batch = job.openai_batch();
  const std::string status = BatchStatus(view);
  const absl::Time created = TimeOf(job.create_time());
  const absl::Time ended = TimeOf(job.end_time());
  auto at = [&](bool when) { return when ? Seconds(ended) : Json(nullptr); };
  Json errors = nullptr;
  if (!view.line_errors.empty()) {
    Json data = Json::array();
    for (const v1::BatchLineError& error : view.line_errors) {
      data.push_back({{"code", error.code()},
                      {"line", error.line()},
                      {"message", error.message()},
                      {"param", error.param().empty() ? Json(nullptr)
                                                      : Json(error.param())}});
    }
    errors = {{"object", "list"}, {"data", std::move(data)}};
  }
  Json metadata = nullptr;
  if (!batch.metadata().empty()) {
    metadata = Json::object();
    std::map<std::string, std::string> sorted(batch.metadata().begin(),
                                              batch.metadata().end());
    for (const auto& [key, value] : sorted) metadata[key] = value;
  }
  const int64_t input = job.usage().prompt_tokens();
  const int64_t output = job.usage().completion_tokens();
  return {
      {"id", BatchService::BatchId(job.job_id())},
      {"object", "batch"},
      {"endpoint", batch.endpoint()},
      {"errors", std::move(errors)},
      {"input_file_id", batch.input_file_id()},
      {"completion_window", batch.completion_window()},
      {"status", status},
      {"output_file_id",
       view.output_file_id.empty() ? Json(nullptr) : Json(view.output_file_id)},
      {"error_file_id",
       view.error_file_id.empty() ? Json(nullptr) : Json(view.error_file_id)},
      {"created_at", Seconds(created)},
      {"in_progress_at", Seconds(TimeOf(job.start_time()))},
      {"expires_at", Seconds(created + view.completion_window)},
      {"finalizing_at", at(status == "completed" || status == "finalizing")},
      {"completed_at", at(status == "completed")},
      {"failed_at", at(status == "failed")},
      {"expired_at", at(status == "expired")},
      {"cancelling_at", status == "cancelled"    ? Seconds(ended)
                        : status == "cancelling" ? Seconds(view.cancelling_at)
                                                 : Json(nullptr)},
      {"cancelled_at", at(status == "cancelled")},
      {"request_counts",
       {{"total", job.total_rows()},
        {"completed", job.rows_succeeded()},
        {"failed", job.rows_failed()}}},
      {"metadata", std::move(metadata)},
      {"model", batch.model().empty() ? Json(nullptr) : Json(batch.model())},
      {"usage",
       {{"input_tokens", input},
        {"input_tokens_details", {{"cached_tokens", 0}}},
        {"output_tokens", output},
        {"output_tokens_details", {{"reasoning_tokens", 0}}},
        {"total_tokens", input + output}}}};
}

// A page of `items` (newest first) after the one whose id is `after`.
template <typename T>
Json Page(const std::vector<T>& items, const std::string& after, int limit,
          absl::FunctionRef<Json(const T&)> encode,
          absl::FunctionRef<std::string(const T&)> id_of) {
  size_t first = 0;
  if (!after.empty()) {
    while (first < items.size() && id_of(items[first]) != after) ++first;
    // An `after` no longer listed (deleted) gives an empty last page.
    first = first < items.size() ? first + 1 : items.size();
  }
  const size_t end = std::min(items.size(), first + static_cast<size_t>(limit));
  Json data = Json::array();
  for (size_t i = first; i < end; ++i) data.push_back(encode(items[i]));
  return {
      {"object", "list"},
      {"data", std::move(data)},
      {"first_id", first < end ? Json(id_of(items[first])) : Json(nullptr)},
      {"last_id", first < end ? Json(id_of(items[end - 1])) : Json(nullptr)},
      {"has_more", end < items.size()}};
}

}  // namespace

ApiResponse BatchApi::Handle(const ApiRequest& request) {
  absl::StatusOr<Caller> caller =
      authenticator_.Authenticate(request.authorization);
  if (!caller.ok()) return ErrorResponse(caller.status());
  const std::string& method = request.method;
  const absl::string_view path = request.path;
  auto wrong_method = [&] {
    return ErrorResponse(absl::InvalidArgumentError(
        absl::StrCat("Unsupported method ", method, " for ", path)));
  };
  if (path == "/v1/files") {
    if (method == "POST") return UploadFile(*caller, request);
    if (method == "GET") return ListFiles(*caller, request);
    return wrong_method();
  }
  if (path == "/v1/batches") {
    if (method == "POST") return CreateBatch(*caller, request);
    if (method == "GET") return ListBatches(*caller, request);
    return wrong_method();
  }
  if (absl::string_view rest = path; absl::ConsumePrefix(&rest, "/v1/files/")) {
    const bool content = absl::ConsumeSuffix(&rest, "/content");
    const std::string file_id(rest);
    if (content) {
      return method == "GET" ? FileContent(*caller, file_id) : wrong_method();
    }
    if (method == "GET") {
      absl::StatusOr<StoredDataset> file = batches_.GetFile(*caller, file_id);
      if (!file.ok()) return ErrorResponse(file.status());
      return JsonResponse(200, FileObject(*file, file_retention_));
    }
    if (method == "DELETE") {
      if (absl::Status s = batches_.DeleteFile(*caller, file_id); !s.ok()) {
        return ErrorResponse(s);
      }
      return JsonResponse(
          200, {{"id", file_id}, {"object", "file"}, {"deleted", true}});
    }
    return wrong_method();
  }
  if (absl::string_view rest = path;
      absl::ConsumePrefix(&rest, "/v1/batches/")) {
    const bool cancel = absl::ConsumeSuffix(&rest, "/cancel");
    const std::string batch_id(rest);
    if (cancel != (method == "POST") || (!cancel && method != "GET")) {
      return wrong_method();
    }
    absl::StatusOr<BatchView> view =
        cancel ? batches_.CancelBatch(*caller, batch_id)
               : batches_.GetBatch(*caller, batch_id);
    if (!view.ok()) return ErrorResponse(view.status());
    return JsonResponse(200, BatchObject(*view));
  }
  return ErrorResponse(absl::NotFoundError(
      absl::StrCat("Unknown request URL: ", method, " ", path,
                   ". This server serves /v1/files and /v1/batches.")));
}

// A file upload, read as it arrives: the form's "file" part goes to the
// store line by line, its "purpose" field is checked whenever it comes
// (the SDKs send it after the file).
ApiResponse BatchApi::UploadFile(const Caller& caller,
                                 const ApiRequest& request) {
  absl::StatusOr<MultipartReader> reader =
      MultipartReader::Create(request.content_type);
  if (!reader.ok()) return ErrorResponse(reader.status());
  class Form final : public FormVisitor {
   public:
    Form(BatchService& batches, const Caller& caller)
        : batches_(batches), caller_(caller) {}

    absl::Status PartStarts(const FormPartHead& head) override {
      part_ = head.name;
      if (part_ == "purpose") {
        purpose_.emplace();
      } else if (part_ == "file") {
        param_ = "file";
        if (file_ != nullptr) {
          return absl::InvalidArgumentError("file: sent twice in one form");
        }
        absl::StatusOr<std::unique_ptr<FileUpload>> upload =
            batches_.StartFileUpload(caller_, head.filename);
        if (!upload.ok()) return upload.status();
        file_ = *std::move(upload);
      }
      return absl::OkStatus();
    }
    absl::Status PartData(absl::string_view data) override {
      if (part_ == "file") return file_->Take(data);
      if (part_ == "purpose") {
        if (purpose_->size() + data.size() > 64) {
          param_ = "purpose";
          return absl::InvalidArgumentError("purpose: longer than 64 bytes");
        }
        purpose_->append(data.data(), data.size());
      }
      return absl::OkStatus();
    }
    absl::Status PartEnds() override {
      if (part_ != "purpose") return absl::OkStatus();
      param_ = "purpose";
      return BatchService::CheckUploadPurpose(*purpose_);
    }

    // The field an error is about.
    const std::string& param() const { return param_; }
    const std::optional<std::string>& purpose() const { return purpose_; }
    FileUpload* file() const { return file_.get(); }

   private:
    BatchService& batches_;
    const Caller& caller_;
    std::string part_;  // the part being read
    std::string param_;
    std::optional<std::string> purpose_;
    std::unique_ptr<FileUpload> file_;
  } form(batches_, caller);
  std::string piece;
  while (true) {
    absl::StatusOr<bool> more = request.body->Next(piece);
    if (!more.ok()) return ErrorResponse(more.status());
    if (!*more) break;
    if (absl::Status fed = reader->Feed(piece, form); !fed.ok()) {
      return ErrorResponse(fed, form.param());
    }
  }
  if (absl::Status finished = reader->Finish(); !finished.ok()) {
    return ErrorResponse(finished);
  }
  if (!form.purpose().has_value()) {
    return ErrorResponse(
        absl::InvalidArgumentError("purpose: missing; send purpose=batch"),
        "purpose");
  }
  if (form.file() == nullptr) {
    return ErrorResponse(
        absl::InvalidArgumentError("file: missing; send the file's lines"),
        "file");
  }
  absl::StatusOr<StoredDataset> stored = form.file()->Complete();
  if (!stored.ok()) return ErrorResponse(stored.status(), "file");
  return JsonResponse(200, FileObject(*stored, file_retention_));
}

ApiResponse BatchApi::ListFiles(const Caller& caller,
                                const ApiRequest& request) {
  const std::map<std::string, std::string> query =
      QueryParameters(request.query);
  absl::StatusOr<int> limit = Limit(query, 10000, 10000);
  if (!limit.ok()) return ErrorResponse(limit.status(), "limit");
  auto purpose = query.find("purpose");
  absl::StatusOr<std::vector<StoredDataset>> files =
      batches_.ListFiles(caller, purpose == query.end() ? "" : purpose->second);
  if (!files.ok()) return ErrorResponse(files.status());
  if (auto order = query.find("order");
      order != query.end() && order->second == "asc") {
    std::reverse(files->begin(), files->end());
  }
  auto after = query.find("after");
  return JsonResponse(
      200,
      Page<StoredDataset>(
          *files, after == query.end() ? "" : after->second, *limit,
          [this](const StoredDataset& file) {
            return FileObject(file, file_retention_);
          },
          [](const StoredDataset& file) { return file.dataset.dataset_id(); }));
}

ApiResponse BatchApi::FileContent(const Caller& caller,
                                  const std::string& file_id) {
  if (absl::Status found = batches_.GetFile(caller, file_id).status();
      !found.ok()) {
    return ErrorResponse(found);
  }
  ApiResponse response;
  response.content_type = "application/octet-stream";
  response.stream = [this, caller, file_id](ResponseWriter& writer) {
    constexpr size_t kChunkBytes = 256 << 10;
    std::string chunk;
    absl::Status read =
        batches_.ReadFile(caller, file_id, [&](absl::string_view line) {
          if (chunk.empty()) chunk.reserve(kChunkBytes + line.size() + 1);
          absl::StrAppend(&chunk, line, "\n");
          if (chunk.size() < kChunkBytes) return absl::OkStatus();
          return writer.Write(std::exchange(chunk, {}));
        });
    if (!read.ok()) return read;
    return chunk.empty() ? absl::OkStatus() : writer.Write(std::move(chunk));
  };
  return response;
}

ApiResponse BatchApi::CreateBatch(const Caller& caller,
                                  const ApiRequest& request) {
  absl::StatusOr<std::string> text_body =
      ReadWholeBody(*request.body, kMaxJsonBodyBytes);
  if (!text_body.ok()) return ErrorResponse(text_body.status());
  const Json body = Json::parse(*text_body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return ErrorResponse(
        absl::InvalidArgumentError("the request body must be a JSON object"));
  }
  auto text = [&body](const char* field) -> std::optional<std::string> {
    auto it = body.find(field);
    if (it == body.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const std::optional<std::string> input_file_id = text("input_file_id");
  const std::optional<std::string> endpoint = text("endpoint");
  const std::optional<std::string> window = text("completion_window");
  for (auto [field, value] : {std::pair{"input_file_id", &input_file_id},
                              std::pair{"endpoint", &endpoint},
                              std::pair{"completion_window", &window}}) {
    if (!value->has_value()) {
      return ErrorResponse(absl::InvalidArgumentError(absl::StrCat(
                               "Missing required parameter: '", field, "'.")),
                           field);
    }
  }
  v1::OpenAIBatch batch;
  batch.set_endpoint(*endpoint);
  batch.set_completion_window(*window);
  if (auto metadata = body.find("metadata");
      metadata != body.end() && !metadata->is_null()) {
    if (!metadata->is_object() || metadata->size() > kMaxMetadataKeys) {
      return ErrorResponse(absl::InvalidArgumentError(absl::StrCat(
                               "metadata: must be an object of at most ",
                               kMaxMetadataKeys, " string values")),
                           "metadata");
    }
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string() || key.size() > kMaxMetadataKeyChars ||
          value.get_ref<const std::string&>().size() > kMaxMetadataValueChars) {
        return ErrorResponse(
            absl::InvalidArgumentError(absl::StrCat(
                "metadata.", key, ": keys are at most ", kMaxMetadataKeyChars,
                " characters and values strings of at most ",
                kMaxMetadataValueChars)),
            "metadata");
      }
      (*batch.mutable_metadata())[key] = value.get<std::string>();
    }
  }
  if (auto expires = body.find("output_expires_after");
      expires != body.end() && !expires->is_null()) {
    auto seconds =
        expires->is_object() ? expires->find("seconds") : expires->end();
    if (seconds == expires->end() || !seconds->is_number_integer() ||
        seconds->get<int64_t>() < 3600) {
      return ErrorResponse(
          absl::InvalidArgumentError(
              "output_expires_after: must be {\"anchor\": \"created_at\", "
              "\"seconds\": N} with N at least 3600"),
          "output_expires_after");
    }
    batch.set_output_expires_after_seconds(seconds->get<int64_t>());
  }
  absl::StatusOr<BatchView> view =
      batches_.CreateBatch(caller, *input_file_id, batch);
  if (!view.ok()) return ErrorResponse(view.status());
  return JsonResponse(200, BatchObject(*view));
}

ApiResponse BatchApi::ListBatches(const Caller& caller,
                                  const ApiRequest& request) {
  const std::map<std::string, std::string> query =
      QueryParameters(request.query);
  absl::StatusOr<int> limit = Limit(query, 20, 100);
  if (!limit.ok()) return ErrorResponse(limit.status(), "limit");
  auto after = query.find("after");
  absl::StatusOr<BatchService::BatchPage> page = batches_.ListBatches(
      caller, after == query.end() ? "" : after->second, *limit);
  if (!page.ok()) return ErrorResponse(page.status());
  Json data = Json::array();
  for (const BatchView& view : page->batches) data.push_back(BatchObject(view));
  auto id_at = [&](size_t i) -> Json {
    return BatchService::BatchId(page->batches[i].job.job_id());
  };
  const size_t count = page->batches.size();
  return JsonResponse(
      200, {{"object", "list"},
            {"data", std::move(data)},
            {"first_id", count > 0 ? id_at(0) : Json(nullptr)},
            {"last_id", count > 0 ? id_at(count - 1) : Json(nullptr)},
            {"has_more", page->has_more}});
}

}  // namespace sdg
