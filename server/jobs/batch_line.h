// The lines of the OpenAI Batch API's files: an input line
// {custom_id, method, url, body}, checked as OpenAI checks a batch's input
// file, and the output and error lines written for it. Pure functions; the
// files are datasets whose rows hold each line as uploaded (kLineColumn), so
// that a line that is not JSON is stored too, named by its batch's errors,
// and downloaded byte for byte.
#ifndef SDG_SERVER_JOBS_BATCH_LINE_H_
#define SDG_SERVER_JOBS_BATCH_LINE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/dataset.h"

namespace sdg {

// A file's row: the line's text, as uploaded (without its newline).
inline constexpr absl::string_view kLineColumn = "line";
// The endpoints a batch may name, each a line's url.
inline constexpr absl::string_view kBatchEndpoints[] = {
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings"};
bool IsBatchEndpoint(absl::string_view endpoint);

// A file row for `line`, and the line a row holds ("" if it holds none).
google::protobuf::Struct LineRow(absl::string_view line);
// Makes `row` the row holding `line`, reusing its memory (a file's lines,
// one after another).
void SetLineRow(absl::string_view line, google::protobuf::Struct& row);
absl::string_view RowLine(const google::protobuf::Struct& row);
// The line of a file row as stored (a serialized Struct:
// Dataset::ReadEncodedRows), read without parsing the row; nullopt unless
// the row is exactly the one "line" string, for the caller to parse.
std::optional<absl::string_view> EncodedRowLine(absl::string_view encoded);
// The lines of a file's rows [first, first + count), read as they are
// stored (a row that is not a line reads as ""); DATA_LOSS for a row that
// does not parse.
absl::Status ReadFileLines(
    const Dataset& file, int64_t first, int64_t count,
    absl::FunctionRef<absl::Status(absl::string_view)> on_line);

struct BatchLine {
  std::string custom_id;
  std::string url;
  // The body as JSON text, sent to the backend as it is.
  std::string body;
  // body.model ("" when it names none).
  std::string model;
  // What sdgd bounds of a body, when it sets them (as numbers).
  std::optional<double> n;
  std::optional<double> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
};

// Parses line `number` (1-based) of an input file: the line, or the error
// OpenAI's validation gives it (code, line, message, param).
struct ParsedBatchLine {
  std::optional<BatchLine> line;
  v1::BatchLineError error;
};
ParsedBatchLine ParseBatchLine(absl::string_view text, int64_t number);

// Checks an input file's lines in order for a batch on `endpoint`: each
// line parses, its url is the endpoint, its custom_id is unique in the
// file, and (when `model_served` says no) some backend serves its model.
// sdgd's own bounds on a line's body, as on a block's (job_spec.h's
// ValidationLimits): n at most max_samples, the body at most
// max_body_bytes (--max_prompt_bytes).
struct BatchLineLimits {
  int max_samples = 128;
  size_t max_body_bytes = 1 << 20;
};

class BatchFileValidator {
 public:
  static constexpr size_t kMaxErrors = 1000;

  BatchFileValidator(std::string endpoint,
                     std::function<bool(const std::string& model)> model_served,
                     BatchLineLimits limits = {})
      : endpoint_(std::move(endpoint)),
        model_served_(std::move(model_served)),
        limits_(limits) {}

  void Add(absl::string_view text);
  int64_t lines() const { return lines_; }
  int64_t error_count() const { return error_count_; }
  // The first kMaxErrors.
  const std::vector<v1::BatchLineError>& errors() const { return errors_; }
  // The model every parsed line names; empty when they name several.
  std::string model() const { return several_models_ ? "" : model_; }

 private:
  void Fail(v1::BatchLineError error);
  // The first of the body's values out of sdgd's bounds, if one is.
  std::optional<v1::BatchLineError> CheckBody(const BatchLine& line,
                                              int64_t number) const;

  const std::string endpoint_;
  const std::function<bool(const std::string&)> model_served_;
  const BatchLineLimits limits_;
  int64_t lines_ = 0;
  int64_t error_count_ = 0;
  std::vector<v1::BatchLineError> errors_;
  std::string model_;  // the first parsed line's
  bool seen_model_ = false;
  bool several_models_ = false;
  // custom_ids seen, by a 64-bit hash of each: flat memory for a
  // 1,000,000-line file (a false duplicate is as likely as 1 in 10^7).
  absl::flat_hash_set<uint64_t> custom_ids_;
};

// The id OpenAI gives a line's request: batch_req_<job>_<line index>.
std::string BatchRequestId(absl::string_view job_id, int64_t row_index);

// An output line for a reply with HTTP status `status_code`: `body` is the
// reply's JSON text, written in as it is.
std::string BatchOutputLine(absl::string_view job_id, int64_t row_index,
                            absl::string_view custom_id, int status_code,
                            absl::string_view request_id,
                            absl::string_view body);
// An error line: with `http_status`, the reply as OpenAI writes a failed
// request (response.body an OpenAI error naming `message`, error null);
// without one (no reply came: the backend was down, the batch was
// cancelled or expired), response null and error {code, message}.
std::string BatchErrorLine(absl::string_view job_id, int64_t row_index,
                           absl::string_view custom_id, int http_status,
                           absl::string_view code, absl::string_view message);

// The custom_id of an input line, or "" if it has none (for error lines of
// lines that were never run).
std::string CustomIdOf(absl::string_view text);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_BATCH_LINE_H_
