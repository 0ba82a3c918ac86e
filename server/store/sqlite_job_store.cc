#include "server/store/sqlite_job_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <set>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "server/store/file_util.h"

namespace sdg {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT UNIQUE NOT NULL,
  request BLOB NOT NULL,
  request_digest TEXT NOT NULL,
  state INTEGER NOT NULL,
  create_ns INTEGER NOT NULL,
  start_ns INTEGER,
  end_ns INTEGER,
  reason TEXT NOT NULL DEFAULT '',
  resumed INTEGER NOT NULL DEFAULT 0,
  finished BLOB);
CREATE TABLE IF NOT EXISTS uploads (
  dataset_id TEXT PRIMARY KEY,
  dataset BLOB NOT NULL,
  info TEXT NOT NULL,
  create_ns INTEGER NOT NULL);
)sql";

// Columns added after the first release: a store made before them gets them
// (empty) when it opens. An empty tenant is the one of a server without
// --auth_tokens_file.
constexpr struct {
  const char* table;
  const char* column;
  const char* declaration;
} kAddedColumns[] = {
    {"jobs", "tenant", "TEXT NOT NULL DEFAULT ''"},
    {"uploads", "tenant", "TEXT NOT NULL DEFAULT ''"},
    {"jobs", "total_rows", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "total_shards", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "last_sequence", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "version", "INTEGER NOT NULL DEFAULT 1"},
    {"uploads", "expire_ns", "INTEGER NOT NULL DEFAULT 9223372036854775807"},
};

using Sql = SqliteJobStore::Sql;

// A job record's columns, in the order RecordAt reads them.
#define SDG_JOB_COLUMNS                                                   \
  "job_id, request, request_digest, state, create_ns, start_ns, end_ns, " \
  "reason, resumed, finished, tenant, total_rows, total_shards, "         \
  "last_sequence, version"

// Each statement with the step it is, for errors; in Sql's order.
constexpr struct {
  Sql sql;
  const char* doing;
  const char* text;
} kStatements[] = {
    {Sql::kInsertUpload, "saving an upload",
     "INSERT INTO uploads (dataset_id, dataset, info, create_ns, tenant, "
     "expire_ns) VALUES (?, ?, ?, ?, ?, ?)"},
    {Sql::kSelectUpload, "reading an upload",
     "SELECT dataset, info, create_ns, tenant, expire_ns FROM uploads "
     "WHERE dataset_id = ?"},
    {Sql::kSelectUploadsBefore, "listing expired uploads",
     "SELECT dataset_id FROM uploads WHERE create_ns < ? OR expire_ns < ?"},
    {Sql::kDeleteUpload, "removing an upload",
     "DELETE FROM uploads WHERE dataset_id = ?"},
    {Sql::kInsertJob, "adding a job",
     "INSERT INTO jobs (job_id, request, request_digest, state, create_ns, "
     "tenant) VALUES (?, ?, ?, ?, ?, ?)"},
    {Sql::kUpdateJob, "saving a job's state",
     "UPDATE jobs SET state = ?, start_ns = ?, end_ns = ?, reason = ?, "
     "resumed = ?, finished = ?, total_rows = ?, total_shards = ?, "
     "last_sequence = ?, version = version + 1 "
     "WHERE job_id = ? AND version = ?"},
    {Sql::kDeleteJob, "removing a job", "DELETE FROM jobs WHERE job_id = ?"},
    {Sql::kSelectJobs, "loading the jobs",
     "SELECT " SDG_JOB_COLUMNS " FROM jobs ORDER BY seq"},
    {Sql::kSelectJob, "loading a job",
     "SELECT " SDG_JOB_COLUMNS " FROM jobs WHERE job_id = ?"},
    {Sql::kSelectUploadsOfTenant, "listing a tenant's uploads",
     "SELECT dataset_id FROM uploads WHERE tenant = ?"},
    {Sql::kSelectJobsOfTenant, "listing a tenant's jobs",
     "SELECT job_id FROM jobs WHERE tenant = ?"},
    {Sql::kSelectJobVersion, "reading a job's version",
     "SELECT version FROM jobs WHERE job_id = ?"},
    {Sql::kSelectUploadsListed, "listing a tenant's uploads",
     "SELECT dataset, info, create_ns, tenant, expire_ns FROM uploads "
     "WHERE tenant = ? ORDER BY create_ns, dataset_id"},
};
#undef SDG_JOB_COLUMNS
static_assert(std::size(kStatements) == SqliteJobStore::kStatementCount);

constexpr bool InSqlOrder() {
  for (size_t i = 0; i < std::size(kStatements); ++i) {
    if (static_cast<size_t>(kStatements[i].sql) != i) return false;
  }
  return true;
}
static_assert(InSqlOrder(), "kStatements must list Sql's values in order");

const char* Doing(Sql sql) { return kStatements[static_cast<int>(sql)].doing; }

int64_t ToNanos(absl::Time time) {
  return time == absl::InfinitePast() ? 0 : absl::ToUnixNanos(time);
}

absl::Time FromNanos(int64_t nanos) {
  return nanos == 0 ? absl::InfinitePast() : absl::FromUnixNanos(nanos);
}

void BindText(sqlite3_stmt* stmt, int index, const std::string& text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()),
                    SQLITE_TRANSIENT);
}

void BindBlob(sqlite3_stmt* stmt, int index, const std::string& bytes) {
  sqlite3_bind_blob(stmt, index, bytes.data(), static_cast<int>(bytes.size()),
                    SQLITE_TRANSIENT);
}

std::string ColumnBytes(sqlite3_stmt* stmt, int index) {
  const void* data = sqlite3_column_blob(stmt, index);
  int size = sqlite3_column_bytes(stmt, index);
  return data == nullptr ? std::string()
                         : std::string(static_cast<const char*>(data), size);
}

// The job record on `stmt`'s row, its columns SDG_JOB_COLUMNS.
JobRecord RecordAt(sqlite3_stmt* stmt) {
  JobRecord record;
  record.job_id = ColumnBytes(stmt, 0);
  record.request.ParseFromString(ColumnBytes(stmt, 1));
  record.request_digest = ColumnBytes(stmt, 2);
  record.state = static_cast<v1::JobState>(sqlite3_column_int(stmt, 3));
  record.create_time = FromNanos(sqlite3_column_int64(stmt, 4));
  record.start_time = FromNanos(sqlite3_column_int64(stmt, 5));
  record.end_time = FromNanos(sqlite3_column_int64(stmt, 6));
  record.reason = ColumnBytes(stmt, 7);
  record.resumed = sqlite3_column_int(stmt, 8);
  record.finished.ParseFromString(ColumnBytes(stmt, 9));
  record.tenant = ColumnBytes(stmt, 10);
  record.total_rows = sqlite3_column_int64(stmt, 11);
  record.total_shards = sqlite3_column_int64(stmt, 12);
  record.last_sequence = static_cast<uint64_t>(sqlite3_column_int64(stmt, 13));
  record.version = sqlite3_column_int64(stmt, 14);
  return record;
}

}  // namespace

class SqliteJobStore::StatementUse {
 public:
  explicit StatementUse(sqlite3_stmt* stmt) : stmt_(stmt) {}
  StatementUse(StatementUse&& other) noexcept
      : stmt_(std::exchange(other.stmt_, nullptr)) {}
  StatementUse& operator=(StatementUse&&) = delete;
  ~StatementUse() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

void SqliteJobStore::FinalizeStatement::operator()(sqlite3_stmt* stmt) const {
  sqlite3_finalize(stmt);
}

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(
    const std::string& state_dir, LogCommitter::Options committer) {
  for (const std::string& dir :
       {state_dir, state_dir + "/jobs", state_dir + "/uploads"}) {
    if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  }
  // SQLite reports an unwritable directory late and vaguely; ask first.
  if (::access(state_dir.c_str(), W_OK) != 0) {
    return FileError("write to --state_dir", state_dir, errno);
  }
  // One server per state_dir: a second would resume the same jobs.
  const std::string lock_path = state_dir + "/LOCK";
  UniqueFd lock_fd(
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock_fd.get() < 0) return FileError("open", lock_path, errno);
  if (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--state_dir ", state_dir, " is in use by another sdgd (", lock_path,
        " is locked); give each server its own state_dir"));
  }
  const std::string path = state_dir + "/sdgd.db";
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::FailedPreconditionError(
        absl::StrCat("open ", path, ": ", message));
  }
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(
      state_dir, db, std::move(lock_fd), std::move(committer)));
  absl::MutexLock lock(&store->mu_);
  sqlite3_busy_timeout(db, 5000);
  // WAL: readers never block the writer; synchronous=FULL: a committed
  // transaction survives a power cut, not only a crash.
  for (const char* sql :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", kSchema}) {
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      absl::Status error = store->Error("setting up the database");
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", error.message()));
    }
  }
  for (const auto& added : kAddedColumns) {
    const std::string probe = absl::StrCat("SELECT ", added.column, " FROM ",
                                           added.table, " LIMIT 0");
    sqlite3_stmt* stmt = nullptr;
    const bool present =
        sqlite3_prepare_v2(db, probe.c_str(), -1, &stmt, nullptr) == SQLITE_OK;
    sqlite3_finalize(stmt);
    if (present) continue;
    const std::string alter =
        absl::StrCat("ALTER TABLE ", added.table, " ADD COLUMN ", added.column,
                     " ", added.declaration);
    if (sqlite3_exec(db, alter.c_str(), nullptr, nullptr, nullptr) !=
        SQLITE_OK) {
      absl::Status error = store->Error("adding a column");
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", error.message()));
    }
  }
  return store;
}

SqliteJobStore::SqliteJobStore(std::string state_dir, sqlite3* db,
                               UniqueFd lock, LogCommitter::Options committer)
    : state_dir_(std::move(state_dir)),
      lock_(std::move(lock)),
      db_(db),
      committer_(std::make_unique<LogCommitter>(std::move(committer))) {}

SqliteJobStore::~SqliteJobStore() {
  committer_.reset();
  absl::MutexLock lock(&mu_);
  for (auto& statement : statements_) statement.reset();
  sqlite3_close(db_);
}

std::string SqliteJobStore::JobDir(const std::string& job_id) const {
  return absl::StrCat(state_dir_, "/jobs/", job_id);
}

std::string SqliteJobStore::UploadDir(const std::string& dataset_id) const {
  return absl::StrCat(state_dir_, "/uploads/", dataset_id);
}

absl::Status SqliteJobStore::Error(const char* doing) {
  const int code = sqlite3_errcode(db_);
  std::string message = absl::StrCat("SQLite (", state_dir_, "/sdgd.db), ",
                                     doing, ": ", sqlite3_errmsg(db_));
  if (code == SQLITE_FULL) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message, "; free space on the state_dir's volume"));
  }
  if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN ||
      code == SQLITE_PERM) {
    return absl::FailedPreconditionError(message);
  }
  if (code == SQLITE_CONSTRAINT) return absl::AlreadyExistsError(message);
  return absl::InternalError(message);
}

absl::StatusOr<SqliteJobStore::StatementUse> SqliteJobStore::Prepared(Sql sql) {
  auto& statement = statements_[static_cast<int>(sql)];
  if (statement == nullptr) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db_, kStatements[static_cast<int>(sql)].text, -1,
                           SQLITE_PREPARE_PERSISTENT, &stmt,
                           nullptr) != SQLITE_OK) {
      return Error(Doing(sql));
    }
    statement.reset(stmt);
  }
  return StatementUse(statement.get());
}

absl::StatusOr<int> SqliteJobStore::Execute(
    Sql sql, absl::FunctionRef<void(sqlite3_stmt*)> bind) {
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(sql));
  bind(use.get());
  if (sqlite3_step(use.get()) != SQLITE_DONE) return Error(Doing(sql));
  return sqlite3_changes(db_);
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> SqliteJobStore::NewJobDataset(
    const std::string& job_id) {
  const std::string dir = JobDir(job_id);
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  return DatasetBuilder::InDirectory(dir);
}

absl::StatusOr<std::shared_ptr<Dataset>> SqliteJobStore::UseUploadedDataset(
    const std::string& dataset_id, const std::string& job_id) {
  const std::string from = UploadDir(dataset_id);
  const std::string to = JobDir(job_id);
  if (absl::Status s = MakeDirectories(to); !s.ok()) return s;
  // Hard links: the job keeps its rows if the upload is removed, at no cost.
  for (const char* name : {"rows.bin", "rows.idx"}) {
    std::string source = absl::StrCat(from, "/", name);
    std::string target = absl::StrCat(to, "/", name);
    ::unlink(target.c_str());
    if (::link(source.c_str(), target.c_str()) != 0) {
      const int error = errno;
      if (error == ENOENT) {
        (void)RemoveTree(to);
        return NoSuchUpload(dataset_id);
      }
      return FileError("link", source, error);
    }
  }
  if (absl::Status s = SyncDirectory(to); !s.ok()) return s;
  return Dataset::OpenDirectory(to);
}

absl::StatusOr<std::shared_ptr<Dataset>> SqliteJobStore::OpenUpload(
    const std::string& dataset_id) {
  // Saved uploads only: an upload being written has no rows file yet.
  SDG_RETURN_IF_ERROR(FindUpload(dataset_id).status());
  return Dataset::OpenDirectory(UploadDir(dataset_id));
}

void SqliteJobStore::DiscardJobDataset(const std::string& job_id) {
  (void)RemoveTree(JobDir(job_id));
}

absl::StatusOr<std::shared_ptr<Dataset>> SqliteJobStore::OpenJobDataset(
    const std::string& job_id) {
  const std::string dir = JobDir(job_id);
  // A builder renames its files into place last: no index, no dataset.
  if (::access((dir + "/rows.idx").c_str(), F_OK) != 0 && errno == ENOENT) {
    return NoJobDataset(job_id);
  }
  return Dataset::OpenDirectory(dir);
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> SqliteJobStore::NewUpload(
    const std::string& dataset_id) {
  const std::string dir = UploadDir(dataset_id);
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  return DatasetBuilder::InDirectory(dir);
}

absl::Status SqliteJobStore::SaveUpload(const StoredDataset& dataset) {
  absl::MutexLock lock(&mu_);
  return Execute(Sql::kInsertUpload,
                 [&](sqlite3_stmt* stmt) {
                   BindText(stmt, 1, dataset.dataset.dataset_id());
                   BindBlob(stmt, 2, dataset.dataset.SerializeAsString());
                   BindText(stmt, 3, dataset.info.ToJson());
                   sqlite3_bind_int64(stmt, 4, ToNanos(dataset.create_time));
                   BindText(stmt, 5, dataset.tenant);
                   sqlite3_bind_int64(stmt, 6,
                                      ExpireNanos(dataset.expire_time));
                 })
      .status();
}

void SqliteJobStore::DiscardUpload(const std::string& dataset_id) {
  (void)RemoveTree(UploadDir(dataset_id));
}

namespace {

// An upload from the current row of `stmt` (dataset, info, create_ns,
// tenant, expire_ns).
absl::StatusOr<StoredDataset> UploadAt(sqlite3_stmt* stmt) {
  StoredDataset stored;
  stored.dataset.ParseFromString(ColumnBytes(stmt, 0));
  SDG_ASSIGN_OR_RETURN(stored.info,
                       DatasetInfo::FromJson(ColumnBytes(stmt, 1)));
  stored.create_time = FromNanos(sqlite3_column_int64(stmt, 2));
  stored.tenant = ColumnBytes(stmt, 3);
  stored.expire_time = ExpireTimeOf(sqlite3_column_int64(stmt, 4));
  return stored;
}

}  // namespace

absl::StatusOr<StoredDataset> SqliteJobStore::FindUpload(
    const std::string& dataset_id) {
  absl::MutexLock lock(&mu_);
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(Sql::kSelectUpload));
  sqlite3_stmt* stmt = use.get();
  BindText(stmt, 1, dataset_id);
  const int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return NoSuchUpload(dataset_id);
  if (rc != SQLITE_ROW) return Error(Doing(Sql::kSelectUpload));
  return UploadAt(stmt);
}

absl::StatusOr<std::vector<StoredDataset>> SqliteJobStore::ListUploads(
    const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(Sql::kSelectUploadsListed));
  BindText(use.get(), 1, tenant);
  std::vector<StoredDataset> listed;
  int rc;
  while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
    SDG_ASSIGN_OR_RETURN(StoredDataset upload, UploadAt(use.get()));
    listed.push_back(std::move(upload));
  }
  if (rc != SQLITE_DONE) return Error(Doing(Sql::kSelectUploadsListed));
  return listed;
}

absl::Status SqliteJobStore::RemoveUpload(const std::string& dataset_id) {
  {
    absl::MutexLock lock(&mu_);
    SDG_ASSIGN_OR_RETURN(int removed,
                         Execute(Sql::kDeleteUpload, [&](sqlite3_stmt* stmt) {
                           BindText(stmt, 1, dataset_id);
                         }));
    if (removed == 0) return NoSuchUpload(dataset_id);
  }
  DiscardUpload(dataset_id);
  return absl::OkStatus();
}

absl::StatusOr<int> SqliteJobStore::PruneUploads(absl::Time cutoff) {
  std::vector<std::string> expired;
  {
    absl::MutexLock lock(&mu_);
    {
      SDG_ASSIGN_OR_RETURN(StatementUse use,
                           Prepared(Sql::kSelectUploadsBefore));
      sqlite3_bind_int64(use.get(), 1, ToNanos(cutoff));
      sqlite3_bind_int64(use.get(), 2, absl::ToUnixNanos(absl::Now()));
      int rc;
      while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
        expired.push_back(ColumnBytes(use.get(), 0));
      }
      if (rc != SQLITE_DONE) return Error(Doing(Sql::kSelectUploadsBefore));
    }
    for (const std::string& id : expired) {
      SDG_RETURN_IF_ERROR(Execute(Sql::kDeleteUpload, [&](sqlite3_stmt* stmt) {
                            BindText(stmt, 1, id);
                          }).status());
    }
  }
  for (const std::string& id : expired) DiscardUpload(id);
  return static_cast<int>(expired.size());
}

absl::Status SqliteJobStore::AddJob(const JobRecord& record) {
  absl::MutexLock lock(&mu_);
  return Execute(Sql::kInsertJob,
                 [&](sqlite3_stmt* stmt) {
                   BindText(stmt, 1, record.job_id);
                   BindBlob(stmt, 2, record.request.SerializeAsString());
                   BindText(stmt, 3, record.request_digest);
                   sqlite3_bind_int(stmt, 4, record.state);
                   sqlite3_bind_int64(stmt, 5, ToNanos(record.create_time));
                   BindText(stmt, 6, record.tenant);
                 })
      .status();
}

absl::Status SqliteJobStore::UpdateJob(const JobRecord& record) {
  absl::MutexLock lock(&mu_);
  SDG_ASSIGN_OR_RETURN(
      const int updated, Execute(Sql::kUpdateJob, [&](sqlite3_stmt* stmt) {
        sqlite3_bind_int(stmt, 1, record.state);
        sqlite3_bind_int64(stmt, 2, ToNanos(record.start_time));
        sqlite3_bind_int64(stmt, 3, ToNanos(record.end_time));
        BindText(stmt, 4, record.reason);
        sqlite3_bind_int(stmt, 5, record.resumed);
        BindBlob(stmt, 6, record.finished.SerializeAsString());
        sqlite3_bind_int64(stmt, 7, record.total_rows);
        sqlite3_bind_int64(stmt, 8, record.total_shards);
        sqlite3_bind_int64(stmt, 9, static_cast<int64_t>(record.last_sequence));
        BindText(stmt, 10, record.job_id);
        sqlite3_bind_int64(stmt, 11, record.version);
      }));
  if (updated == 1) return absl::OkStatus();
  // Not saved: tell a job not stored from one saved by another writer.
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(Sql::kSelectJobVersion));
  BindText(use.get(), 1, record.job_id);
  const int rc = sqlite3_step(use.get());
  if (rc == SQLITE_DONE) return NoSuchJob(record.job_id);
  if (rc != SQLITE_ROW) return Error(Doing(Sql::kSelectJobVersion));
  return JobChanged(record.job_id, record.version,
                    sqlite3_column_int64(use.get(), 0));
}

absl::Status SqliteJobStore::RemoveJob(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    SDG_RETURN_IF_ERROR(Execute(Sql::kDeleteJob, [&](sqlite3_stmt* stmt) {
                          BindText(stmt, 1, job_id);
                        }).status());
  }
  return RemoveTree(JobDir(job_id));
}

absl::StatusOr<std::vector<JobRecord>> SqliteJobStore::LoadJobs() {
  absl::MutexLock lock(&mu_);
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(Sql::kSelectJobs));
  sqlite3_stmt* stmt = use.get();
  std::vector<JobRecord> records;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    records.push_back(RecordAt(stmt));
  }
  if (rc != SQLITE_DONE) return Error(Doing(Sql::kSelectJobs));
  return records;
}

absl::StatusOr<std::vector<JobRecord>> SqliteJobStore::LoadJobsById(
    absl::Span<const std::string> job_ids) {
  absl::MutexLock lock(&mu_);
  // One read transaction for them all: each statement would otherwise be a
  // transaction of its own, with its locks taken and released. (One
  // statement alone is one already.)
  const bool several = job_ids.size() > 1;
  if (several &&
      sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error("starting to load jobs");
  }
  absl::Cleanup end = [this, several]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (several) sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  };
  std::vector<JobRecord> records;
  for (const std::string& job_id : job_ids) {
    SDG_ASSIGN_OR_RETURN(std::optional<JobRecord> record, SelectJob(job_id));
    if (record.has_value()) records.push_back(*std::move(record));
  }
  return records;
}

absl::StatusOr<std::optional<JobRecord>> SqliteJobStore::SelectJob(
    const std::string& job_id) {
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(Sql::kSelectJob));
  BindText(use.get(), 1, job_id);
  switch (sqlite3_step(use.get())) {
    case SQLITE_ROW:
      return RecordAt(use.get());
    case SQLITE_DONE:
      return std::nullopt;
    default:
      return Error(Doing(Sql::kSelectJob));
  }
}

absl::StatusOr<std::shared_ptr<EventLog>> SqliteJobStore::OpenJobLog(
    const std::string& job_id,
    absl::FunctionRef<void(const LogEvent&)> replay) {
  const std::string dir = JobDir(job_id);
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<EventLog>> log =
      FileEventLog::Open(dir + "/events.log", *committer_, replay);
  if (log.ok()) {
    if (absl::Status s = SyncDirectory(dir); !s.ok()) return s;
  }
  return log;
}

std::shared_ptr<EventLog> SqliteJobStore::OpenFinishedJobLog(
    const std::string& job_id) {
  return FileEventLog::OpenFinished(JobDir(job_id) + "/events.log");
}

absl::StatusOr<std::vector<std::string>> SqliteJobStore::IdsOfTenant(
    Sql sql, const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  SDG_ASSIGN_OR_RETURN(StatementUse use, Prepared(sql));
  BindText(use.get(), 1, tenant);
  std::vector<std::string> ids;
  int rc;
  while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
    ids.push_back(ColumnBytes(use.get(), 0));
  }
  if (rc != SQLITE_DONE) return Error(Doing(sql));
  return ids;
}

absl::StatusOr<StorageUsage> SqliteJobStore::TenantUsage(
    const std::string& tenant) {
  absl::StatusOr<std::vector<std::string>> uploads =
      IdsOfTenant(Sql::kSelectUploadsOfTenant, tenant);
  if (!uploads.ok()) return uploads.status();
  absl::StatusOr<std::vector<std::string>> jobs =
      IdsOfTenant(Sql::kSelectJobsOfTenant, tenant);
  if (!jobs.ok()) return jobs.status();
  // The files are stat'ed outside mu_. A job's dataset linked from an
  // upload is one inode: counted once, with the upload.
  std::set<std::pair<dev_t, ino_t>> counted;
  auto size_of = [&counted](const std::string& path) -> int64_t {
    struct stat info;
    if (::stat(path.c_str(), &info) != 0) return 0;  // not (or no longer) there
    if (!counted.emplace(info.st_dev, info.st_ino).second) return 0;
    return info.st_size;
  };
  StorageUsage usage;
  for (const std::string& id : *uploads) {
    for (const char* name : {"/rows.bin", "/rows.idx"}) {
      usage.upload_bytes += size_of(UploadDir(id) + name);
    }
  }
  for (const std::string& id : *jobs) {
    for (const char* name : {"/rows.bin", "/rows.idx"}) {
      usage.dataset_bytes += size_of(JobDir(id) + name);
    }
    usage.result_bytes += size_of(JobDir(id) + "/events.log");
  }
  return usage;
}

}  // namespace sdg
