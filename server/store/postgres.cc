#include "server/store/postgres.h"

#include <endian.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sdg::pg {
namespace {

// Type OIDs (pg_type.h), element and array.
constexpr unsigned int kInt4 = 23, kInt8 = 20, kText = 25, kBytea = 17;
constexpr unsigned int kInt4Array = 1007, kInt8Array = 1016, kTextArray = 1009,
                       kByteaArray = 1001;

void PutInt32(std::string& out, int32_t value) {
  const uint32_t big = htobe32(static_cast<uint32_t>(value));
  out.append(reinterpret_cast<const char*>(&big), sizeof(big));
}

void PutInt64(std::string& out, int64_t value) {
  const uint64_t big = htobe64(static_cast<uint64_t>(value));
  out.append(reinterpret_cast<const char*>(&big), sizeof(big));
}

// A one-dimensional array in binary format: dimensions, then each element
// as its length and its bytes.
template <typename T, typename Put>
std::string Array(unsigned int element_type, const std::vector<T>& values,
                  Put put) {
  std::string out;
  PutInt32(out, 1);  // dimensions
  PutInt32(out, 0);  // no NULLs
  PutInt32(out, static_cast<int32_t>(element_type));
  PutInt32(out, static_cast<int32_t>(values.size()));
  PutInt32(out, 1);  // lower bound
  for (const T& value : values) put(out, value);
  return out;
}

void PutBytesElement(std::string& out, absl::string_view value) {
  PutInt32(out, static_cast<int32_t>(value.size()));
  out.append(value.data(), value.size());
}

std::string ServerName(PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  const char* db = PQdb(conn);
  return absl::StrCat(host != nullptr ? host : "?", ":",
                      port != nullptr ? port : "?", "/",
                      db != nullptr ? db : "?");
}

// libpq's messages end in a newline and may hold several lines.
std::string CleanMessage(const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

}  // namespace

Params& Params::Add(unsigned int type, std::string bytes) {
  const std::string& stored = storage_.emplace_back(std::move(bytes));
  types_.push_back(type);
  values_.push_back(stored.data());
  lengths_.push_back(static_cast<int>(stored.size()));
  formats_.push_back(1);  // binary
  return *this;
}

Params& Params::Text(absl::string_view value) {
  return Add(kText, std::string(value));
}

Params& Params::Bytes(absl::string_view value) {
  return Add(kBytea, std::string(value));
}

Params& Params::Int64(int64_t value) {
  std::string bytes;
  PutInt64(bytes, value);
  return Add(kInt8, std::move(bytes));
}

Params& Params::Int32(int32_t value) {
  std::string bytes;
  PutInt32(bytes, value);
  return Add(kInt4, std::move(bytes));
}

Params& Params::TextArray(const std::vector<absl::string_view>& values) {
  return Add(kTextArray, Array(kText, values, PutBytesElement));
}

Params& Params::BytesArray(const std::vector<absl::string_view>& values) {
  return Add(kByteaArray, Array(kBytea, values, PutBytesElement));
}

Params& Params::Int64Array(const std::vector<int64_t>& values) {
  return Add(kInt8Array,
             Array(kInt8, values, [](std::string& out, int64_t value) {
               PutInt32(out, sizeof(int64_t));
               PutInt64(out, value);
             }));
}

Params& Params::Int32Array(const std::vector<int32_t>& values) {
  return Add(kInt4Array,
             Array(kInt4, values, [](std::string& out, int32_t value) {
               PutInt32(out, sizeof(int32_t));
               PutInt32(out, value);
             }));
}

Result::Result(Result&& other) noexcept
    : result_(std::exchange(other.result_, nullptr)) {}

Result& Result::operator=(Result&& other) noexcept {
  if (this != &other) {
    PQclear(result_);
    result_ = std::exchange(other.result_, nullptr);
  }
  return *this;
}

Result::~Result() { PQclear(result_); }

int Result::rows() const { return PQntuples(result_); }

int64_t Result::affected() const {
  const char* count = PQcmdTuples(result_);
  return count != nullptr && *count != '\0' ? std::strtoll(count, nullptr, 10)
                                            : 0;
}

bool Result::IsNull(int row, int column) const {
  return PQgetisnull(result_, row, column) != 0;
}

int64_t Result::Int64(int row, int column) const {
  if (IsNull(row, column) || PQgetlength(result_, row, column) != 8) return 0;
  uint64_t big;
  std::memcpy(&big, PQgetvalue(result_, row, column), sizeof(big));
  return static_cast<int64_t>(be64toh(big));
}

int32_t Result::Int32(int row, int column) const {
  if (IsNull(row, column) || PQgetlength(result_, row, column) != 4) return 0;
  uint32_t big;
  std::memcpy(&big, PQgetvalue(result_, row, column), sizeof(big));
  return static_cast<int32_t>(be32toh(big));
}

absl::string_view Result::Bytes(int row, int column) const {
  if (IsNull(row, column)) return {};
  return absl::string_view(PQgetvalue(result_, row, column),
                           PQgetlength(result_, row, column));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (conn == nullptr) {
    return absl::ResourceExhaustedError("PostgreSQL: out of memory");
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    // The message names the host and the reason, never the password.
    const std::string message = CleanMessage(PQerrorMessage(conn));
    PQfinish(conn);
    // The server answered and refused these credentials or this database:
    // asking again will not help. Anything else (no answer, a server
    // starting or shutting down, too many connections) may pass.
    const bool refused = absl::StrContains(message, "authentication failed") ||
                         absl::StrContains(message, "no pg_hba.conf entry") ||
                         (absl::StrContains(message, "FATAL") &&
                          absl::StrContains(message, "does not exist"));
    const std::string text =
        absl::StrCat("PostgreSQL: cannot connect: ", message);
    return refused ? absl::PermissionDeniedError(text)
                   : absl::UnavailableError(text);
  }
  // Notices ("relation already exists, skipping") are not errors; libpq
  // would print them on stderr.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<Connection>(new Connection(conn));
}

Connection::Connection(pg_conn* conn) : conn_(conn), name_(ServerName(conn)) {}

Connection::~Connection() { PQfinish(conn_); }

bool Connection::ok() const { return PQstatus(conn_) == CONNECTION_OK; }

absl::StatusOr<bool> Connection::AwaitNotification(absl::Duration timeout) {
  auto take_notifications = [this] {
    bool any = false;
    while (PGnotify* notification = PQnotifies(conn_)) {
      PQfreemem(notification);
      any = true;
    }
    return any;
  };
  if (take_notifications()) return true;
  pollfd socket{PQsocket(conn_), POLLIN, 0};
  const int timeout_ms = static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(timeout), 0, std::numeric_limits<int>::max()));
  // EINTR counts as the timeout: the caller looks again.
  if (socket.fd >= 0 && poll(&socket, 1, timeout_ms) <= 0) return false;
  // Readable (or closed: then reading fails).
  if (socket.fd < 0 || PQconsumeInput(conn_) == 0) {
    return absl::UnavailableError(absl::StrCat(
        "PostgreSQL (", name_,
        "): connection lost: ", CleanMessage(PQerrorMessage(conn_))));
  }
  return take_notifications();
}

absl::Status Connection::Reset() {
  PQreset(conn_);
  if (ok()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("PostgreSQL (", name_,
                   "): cannot connect: ", CleanMessage(PQerrorMessage(conn_))));
}

absl::StatusOr<Result> Connection::Exec(absl::string_view sql,
                                        const Params& params,
                                        const char* doing) {
  const std::string text(sql);
  pg_result* raw =
      PQexecParams(conn_, text.c_str(), params.size(), params.types(),
                   params.values(), params.lengths(), params.formats(),
                   /*resultFormat=*/1);
  Result result(raw);  // owns it from here
  const ExecStatusType status =
      raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
  return Error(doing, raw);
}

absl::Status Connection::ExecScript(const std::string& sql, const char* doing) {
  Result result(PQexec(conn_, sql.c_str()));
  pg_result* raw = result.get();
  if (raw != nullptr && PQresultStatus(raw) == PGRES_COMMAND_OK) {
    return absl::OkStatus();
  }
  return Error(doing, raw);
}

absl::Status Connection::Error(const char* doing, pg_result* result) const {
  const char* state = result != nullptr
                          ? PQresultErrorField(result, PG_DIAG_SQLSTATE)
                          : nullptr;
  const std::string message = CleanMessage(
      result != nullptr ? PQresultErrorMessage(result) : PQerrorMessage(conn_));
  std::string text = absl::StrCat(
      "PostgreSQL (", name_, "), ", doing, ": ",
      message.empty() ? CleanMessage(PQerrorMessage(conn_)) : message);
  const absl::string_view code = state != nullptr ? state : "";
  if (code == "23505") return absl::AlreadyExistsError(text);
  if (code == "53100") {
    return absl::ResourceExhaustedError(
        absl::StrCat(text, "; free space on the database's volume"));
  }
  // No SQLSTATE: the connection went. Class 08: connection exceptions;
  // 57P01-57P03: shutting down, crashed, starting; 53300: too many
  // connections; 40001/40P01: serialization failure, deadlock.
  if (code.empty() || !ok() || absl::StartsWith(code, "08") ||
      absl::StartsWith(code, "57P") || code == "53300" || code == "40001" ||
      code == "40P01") {
    return absl::UnavailableError(text);
  }
  return absl::InternalError(text);
}

absl::StatusOr<Transaction> Transaction::Begin(Connection& conn) {
  absl::StatusOr<Result> begun = conn.Exec("BEGIN", "starting a transaction");
  if (!begun.ok()) return begun.status();
  return Transaction(&conn);
}

Transaction::Transaction(Transaction&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)) {}

Transaction::~Transaction() {
  if (conn_ != nullptr && conn_->ok()) {
    (void)conn_->Exec("ROLLBACK", "rolling back");
  }
}

absl::Status Transaction::Commit() {
  Connection* conn = std::exchange(conn_, nullptr);
  return conn->Exec("COMMIT", "committing").status();
}

Pool::Lease::~Lease() {
  if (conn_ != nullptr) pool_->GiveBack(std::move(conn_));
}

absl::StatusOr<Pool::Lease> Pool::Acquire() {
  std::unique_ptr<Connection> conn;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Pool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
          return !pool->idle_.empty() || pool->open_ < pool->size_;
        },
        this));
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    } else {
      ++open_;  // reserved; connected below, outside the lock
    }
  }
  if (conn == nullptr) {
    absl::StatusOr<std::unique_ptr<Connection>> opened =
        Connection::Open(conninfo_);
    if (!opened.ok()) {
      absl::MutexLock lock(&mu_);
      --open_;
      return opened.status();
    }
    conn = *std::move(opened);
  } else if (!conn->ok()) {
    if (absl::Status reset = conn->Reset(); !reset.ok()) {
      GiveBack(std::move(conn));
      return reset;
    }
  }
  return Lease(this, std::move(conn));
}

void Pool::GiveBack(std::unique_ptr<Connection> conn) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(conn));
}

namespace {

// libpq's parse of a conninfo: nullptr (and `error`) if it does not parse.
std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)> ParseConninfo(
    const std::string& conninfo, std::string& error) {
  char* message = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &message);
  if (message != nullptr) {
    error = CleanMessage(message);
    PQfreemem(message);
  }
  return {options, PQconninfoFree};
}

}  // namespace

absl::Status CheckConninfo(const std::string& conninfo) {
  std::string error;
  if (ParseConninfo(conninfo, error) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a PostgreSQL connection string or URL: ",
                     error.empty() ? "out of memory" : error));
  }
  return absl::OkStatus();
}

bool ConninfoHasPassword(const std::string& conninfo) {
  std::string error;
  auto options = ParseConninfo(conninfo, error);
  if (options == nullptr) return false;
  for (const PQconninfoOption* option = options.get();
       option->keyword != nullptr; ++option) {
    if (std::strcmp(option->keyword, "password") == 0) {
      return option->val != nullptr && *option->val != '\0';
    }
  }
  return false;
}

bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsResourceExhausted(status);
}

}  // namespace sdg::pg
