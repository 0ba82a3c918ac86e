// A thin RAII layer over libpq, the PostgreSQL client: a connection, its
// results, typed binary parameters, transactions and a pool. Everything
// goes in and out in binary format (no escaping, no text parsing of
// numbers or bytes). Errors name the server (host, port, database) and what
// was being done, never the conninfo: it may hold a password.
#ifndef SDG_SERVER_STORE_POSTGRES_H_
#define SDG_SERVER_STORE_POSTGRES_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

struct pg_conn;
struct pg_result;

namespace sdg::pg {

// One statement's parameters, in order ($1, $2, ...), each with its type.
class Params {
 public:
  Params& Text(absl::string_view value);
  Params& Bytes(absl::string_view value);
  Params& Int64(int64_t value);
  Params& Int32(int32_t value);
  // Arrays, for one statement over many rows (unnest).
  Params& TextArray(const std::vector<absl::string_view>& values);
  Params& BytesArray(const std::vector<absl::string_view>& values);
  Params& Int64Array(const std::vector<int64_t>& values);
  Params& Int32Array(const std::vector<int32_t>& values);

  int size() const { return static_cast<int>(types_.size()); }
  const unsigned int* types() const { return types_.data(); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  Params& Add(unsigned int type, std::string bytes);
  std::deque<std::string> storage_;  // stable addresses for values_
  std::vector<unsigned int> types_;
  std::vector<const char*> values_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
};

// A statement's result rows, in binary format: read each column with the
// accessor of its SQL type (bigint, integer, text or bytea).
class Result {
 public:
  explicit Result(pg_result* result) : result_(result) {}
  Result(Result&& other) noexcept;
  Result& operator=(Result&& other) noexcept;
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  ~Result();

  int rows() const;
  pg_result* get() const { return result_; }
  // Rows an INSERT, UPDATE or DELETE touched.
  int64_t affected() const;
  bool IsNull(int row, int column) const;
  int64_t Int64(int row, int column) const;
  int32_t Int32(int row, int column) const;
  // text and bytea columns: the bytes as stored (NULL reads as empty).
  absl::string_view Bytes(int row, int column) const;
  std::string String(int row, int column) const {
    return std::string(Bytes(row, column));
  }

 private:
  pg_result* result_;
};

class Connection {
 public:
  // Connects with `conninfo` (a postgresql:// URL or key=value pairs).
  // PERMISSION_DENIED when the server refused the credentials or has no
  // such role or database; UNAVAILABLE when it could not be reached (or was
  // starting, shutting down, full).
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const std::string& conninfo);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Runs one statement. `doing` says what for, in errors ("adding a job").
  absl::StatusOr<Result> Exec(absl::string_view sql, const Params& params,
                              const char* doing);
  absl::StatusOr<Result> Exec(absl::string_view sql, const char* doing) {
    return Exec(sql, Params(), doing);
  }
  // Runs several statements separated by semicolons, with no parameters
  // (schema migrations).
  absl::Status ExecScript(const std::string& sql, const char* doing);
  // Waits up to `timeout` for a notification (NOTIFY on a channel this
  // connection LISTENs to); true if one arrived, now or during an earlier
  // statement. UNAVAILABLE if the connection is lost.
  absl::StatusOr<bool> AwaitNotification(absl::Duration timeout);
  // False once the connection is lost; Reset connects again.
  bool ok() const;
  absl::Status Reset();
  // "host:port/database", for messages.
  const std::string& name() const { return name_; }

 private:
  explicit Connection(pg_conn* conn);
  absl::Status Error(const char* doing, pg_result* result) const;

  pg_conn* conn_;
  std::string name_;
};

// BEGIN on construction, ROLLBACK on destruction unless Commit succeeded.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Connection& conn);
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  absl::Status Commit();

 private:
  explicit Transaction(Connection* conn) : conn_(conn) {}
  Connection* conn_;  // null once committed or rolled back
};

// Up to `size` connections shared by threads: Acquire hands one out (a new
// one, an idle one, or, when all are in use, the next one given back).
class Pool {
 public:
  class Lease {
   public:
    Lease(Pool* pool, std::unique_ptr<Connection> conn)
        : pool_(pool), conn_(std::move(conn)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    Connection& operator*() const { return *conn_; }
    Connection* operator->() const { return conn_.get(); }

   private:
    Pool* pool_;
    std::unique_ptr<Connection> conn_;
  };

  Pool(std::string conninfo, int size)
      : conninfo_(std::move(conninfo)), size_(size) {}
  // A working connection: a lost one is connected again first.
  absl::StatusOr<Lease> Acquire();

 private:
  void GiveBack(std::unique_ptr<Connection> conn);

  const std::string conninfo_;
  const int size_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle and leased
};

// INVALID_ARGUMENT if `conninfo` (a postgresql:// URL or key=value pairs)
// does not parse; the message never repeats it (it may hold a password).
absl::Status CheckConninfo(const std::string& conninfo);
// True if `conninfo` carries a password.
bool ConninfoHasPassword(const std::string& conninfo);

// True for errors a later attempt may not meet: the server is unreachable,
// restarting, failing over, or out of disk.
bool IsTransient(const absl::Status& status);

}  // namespace sdg::pg

#endif  // SDG_SERVER_STORE_POSTGRES_H_
