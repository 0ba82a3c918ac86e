#include "server/store/postgres_job_store.h"

#include <endian.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "server/store/postgres_schema.h"

namespace sdg {
namespace {

// Rows of an upload or a job's dataset that never finished (a crash
// mid-upload) go after this long.
constexpr absl::Duration kUnfinishedDatasetAge = absl::Hours(24);

int64_t ToNanos(absl::Time time) {
  return time == absl::InfinitePast() ? 0 : absl::ToUnixNanos(time);
}

absl::Time FromNanos(int64_t nanos) {
  return nanos == 0 ? absl::InfinitePast() : absl::FromUnixNanos(nanos);
}

// Drops holder $1's hold on its dataset, and the dataset with its last
// holder (the CTE's snapshot still shows $1, hence `h.holder <> $1`).
constexpr char kDropHolder[] =
    "WITH gone AS (DELETE FROM dataset_holders WHERE holder = $1 "
    "RETURNING dataset) "
    "DELETE FROM datasets d USING gone WHERE d.dataset = gone.dataset "
    "AND NOT EXISTS (SELECT 1 FROM dataset_holders h "
    "WHERE h.dataset = d.dataset AND h.holder <> $1)";

std::string UploadHolder(const std::string& dataset_id) {
  return absl::StrCat("upload:", dataset_id);
}

std::string JobHolder(const std::string& job_id) {
  return absl::StrCat("job:", job_id);
}

// Runs `attempt` until it succeeds, fails for good, or has failed on
// transient errors (the database down, restarting, failing over) for
// `limit`, backing off between attempts: a worker reading a shard's rows
// waits out an outage, as the committer does, instead of failing the rows.
template <typename T>
absl::StatusOr<T> RetryTransient(
    absl::Duration limit, absl::FunctionRef<absl::StatusOr<T>()> attempt) {
  const absl::Time give_up = absl::Now() + limit;
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    absl::StatusOr<T> result = attempt();
    if (result.ok() || !pg::IsTransient(result.status()) ||
        absl::Now() + backoff > give_up) {
      return result;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

// A dataset's rows are stored in chunks (dataset_chunks): each chunk
// holds rows [first_row, first_row + row_count), each row a 4-byte
// big-endian length and then the serialized Struct.
constexpr size_t kRowLengthBytes = sizeof(uint32_t);

void AppendRowLength(uint32_t length, std::string& chunk) {
  const uint32_t big = htobe32(length);
  chunk.append(reinterpret_cast<const char*>(&big), sizeof(big));
}

uint32_t ReadRowLength(absl::string_view chunk) {
  uint32_t big;
  std::memcpy(&big, chunk.data(), sizeof(big));
  return be32toh(big);
}

// Shards ask for their rows in order, a few at a time: each query reads
// ahead (whole chunks, up to kReadAheadRows rows and kReadAheadBytes), and
// the shards that follow take their rows from that window, so that a job
// costs the database one query per window rather than one per shard. One
// query at a time per dataset: a worker that misses while another fetches
// waits for it, as what it fetches is most likely what it needs.
class PostgresDataset final : public Dataset {
 public:
  static constexpr int64_t kReadAheadRows = 1024;
  static constexpr int64_t kReadAheadBytes = 1 << 20;

  PostgresDataset(std::shared_ptr<pg::Pool> pool, int64_t id, int64_t rows,
                  absl::Duration max_outage)
      : pool_(std::move(pool)), id_(id), rows_(rows), max_outage_(max_outage) {}

  int64_t row_count() const override { return rows_; }

  absl::StatusOr<std::vector<google::protobuf::Struct>> ReadRows(
      int64_t first, int64_t count) const override {
    std::vector<google::protobuf::Struct> rows;
    int64_t row = first;
    SDG_RETURN_IF_ERROR(
        ReadEncodedRows(first, count, [&](absl::string_view encoded) {
          if (!rows.emplace_back().ParseFromArray(
                  encoded.data(), static_cast<int>(encoded.size()))) {
            return absl::DataLossError(absl::StrCat(
                "PostgreSQL: dataset ", id_, " row ", row, " is damaged"));
          }
          ++row;
          return absl::OkStatus();
        }));
    return rows;
  }

  absl::Status ReadEncodedRows(int64_t first, int64_t count,
                               EncodedRowFn on_row) const override {
    count = std::max<int64_t>(0, std::min(count, rows_ - first));
    if (count == 0) return absl::OkStatus();
    std::shared_ptr<const Window> window = WindowFor(first, count);
    if (window == nullptr) {
      absl::StatusOr<std::shared_ptr<const Window>> fetched =
          RetryTransient<std::shared_ptr<const Window>>(
              max_outage_, [&] { return Fetch(first, count); });
      absl::MutexLock lock(&mu_);
      fetching_ = false;
      if (!fetched.ok()) return fetched.status();
      window_ = *std::move(fetched);
      window = window_;
    }
    // Outside the lock, from the window, which no one changes.
    for (int64_t i = 0; i < count; ++i) {
      SDG_RETURN_IF_ERROR(on_row(window->rows[first - window->first + i]));
    }
    return absl::OkStatus();
  }

 private:
  // Rows [first, first + rows.size()) as one query read them: whole
  // chunks, and a view of each row in them. Built in place and never
  // moved, as the views point into the chunks.
  struct Window {
    Window() = default;
    Window(const Window&) = delete;
    Window& operator=(const Window&) = delete;

    int64_t first = 0;
    std::vector<std::string> chunks;
    std::vector<absl::string_view> rows;
  };

  // The window if it holds rows [first, first + count); else null, and
  // this caller is the one that fetches.
  std::shared_ptr<const Window> WindowFor(int64_t first, int64_t count) const {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* fetching) { return !*fetching; }, &fetching_));
    if (window_ != nullptr && first >= window_->first &&
        first + count <=
            window_->first + static_cast<int64_t>(window_->rows.size())) {
      return window_;
    }
    fetching_ = true;
    return nullptr;
  }

  // The chunks that hold rows [first, first + count), then more while
  // within the read-ahead.
  absl::StatusOr<std::shared_ptr<const Window>> Fetch(int64_t first,
                                                      int64_t count) const {
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_ASSIGN_OR_RETURN(
        pg::Result result,
        conn->Exec("SELECT first_row, row_count, rows FROM (SELECT first_row, "
                   "row_count, rows, sum(octet_length(rows)) "
                   "OVER (ORDER BY first_row) AS bytes FROM dataset_chunks "
                   "WHERE dataset = $1 AND first_row < $3 AND first_row >= "
                   "(SELECT first_row FROM dataset_chunks WHERE dataset = $1 "
                   "AND first_row <= $2 ORDER BY first_row DESC LIMIT 1)) c "
                   "WHERE first_row < $4 OR bytes <= $5 ORDER BY first_row",
                   pg::Params()
                       .Int64(id_)
                       .Int64(first)
                       .Int64(first + std::max(count, kReadAheadRows))
                       .Int64(first + count)
                       .Int64(kReadAheadBytes),
                   "reading a dataset's rows"));
    auto window = std::make_shared<Window>();
    // Reserved whole: a reallocation would move short (inline) strings and
    // leave the views of their rows dangling.
    window->chunks.reserve(result.rows());
    for (int i = 0; i < result.rows(); ++i) {
      const int64_t chunk_first = result.Int64(i, 0);
      if (i == 0) window->first = chunk_first;
      const int64_t expected_first =
          window->first + static_cast<int64_t>(window->rows.size());
      if (chunk_first != expected_first) {
        return absl::DataLossError(absl::StrCat(
            "PostgreSQL: dataset ", id_, " has a chunk at row ", chunk_first,
            " where row ", expected_first, " was expected"));
      }
      const absl::string_view chunk =
          window->chunks.emplace_back(result.Bytes(i, 2));
      SDG_RETURN_IF_ERROR(
          SplitChunk(chunk, chunk_first, result.Int32(i, 1), window->rows));
    }
    const int64_t end =
        window->first + static_cast<int64_t>(window->rows.size());
    if (result.rows() == 0 || window->first > first || end < first + count) {
      return absl::DataLossError(
          absl::StrCat("PostgreSQL: dataset ", id_, " lacks rows in [", first,
                       ", ", first + count, "); its stored chunks hold ",
                       result.rows() == 0
                           ? std::string("none of them")
                           : absl::StrCat("[", window->first, ", ", end, ")")));
    }
    return window;
  }

  // Appends views of the `row_count` rows of `chunk` (which starts at row
  // `chunk_first`) to `rows`.
  absl::Status SplitChunk(absl::string_view chunk, int64_t chunk_first,
                          int32_t row_count,
                          std::vector<absl::string_view>& rows) const {
    for (int32_t i = 0; i < row_count; ++i) {
      if (chunk.size() < kRowLengthBytes) return Damaged(chunk_first);
      const uint32_t length = ReadRowLength(chunk);
      chunk.remove_prefix(kRowLengthBytes);
      if (chunk.size() < length) return Damaged(chunk_first);
      rows.push_back(chunk.substr(0, length));
      chunk.remove_prefix(length);
    }
    if (!chunk.empty()) return Damaged(chunk_first);
    return absl::OkStatus();
  }

  absl::Status Damaged(int64_t chunk_first) const {
    return absl::DataLossError(absl::StrCat("PostgreSQL: dataset ", id_,
                                            " has a damaged chunk at row ",
                                            chunk_first));
  }

  const std::shared_ptr<pg::Pool> pool_;
  const int64_t id_;
  const int64_t rows_;
  const absl::Duration max_outage_;
  mutable absl::Mutex mu_;
  mutable bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::shared_ptr<const Window> window_ ABSL_GUARDED_BY(mu_);
};

// Packs rows into chunks of about kChunkBytes and sends the chunks to
// dataset_chunks in batches of about kBatchBytes as they come; Finish makes
// the dataset complete and gives it to its holder in one transaction. A
// builder dropped unfinished removes what it sent.
class PostgresDatasetBuilder final : public DatasetBuilder {
 public:
  static constexpr size_t kChunkBytes = 64 << 10;
  static constexpr size_t kBatchBytes = 1 << 20;

  PostgresDatasetBuilder(std::shared_ptr<pg::Pool> pool, std::string holder,
                         int64_t id, absl::Duration max_outage)
      : pool_(std::move(pool)),
        holder_(std::move(holder)),
        id_(id),
        max_outage_(max_outage) {}

  ~PostgresDatasetBuilder() override {
    if (finished_) return;
    absl::StatusOr<pg::Pool::Lease> conn = pool_->Acquire();
    if (conn.ok()) {
      (void)(*conn)->Exec("DELETE FROM datasets WHERE dataset = $1",
                          pg::Params().Int64(id_),
                          "removing an unfinished dataset");
    }
  }

  absl::Status Add(const google::protobuf::Struct& row) override {
    const size_t size = row.ByteSizeLong();
    if (size > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", info_.rows, " is ", size,
                       " bytes serialized, more than a dataset row can be"));
    }
    info_.Add(row);
    Chunk& chunk = open_chunk_;
    const size_t at = chunk.rows.size();
    AppendRowLength(static_cast<uint32_t>(size), chunk.rows);
    chunk.rows.resize(at + kRowLengthBytes + size);
    if (!row.SerializeToArray(chunk.rows.data() + at + kRowLengthBytes,
                              static_cast<int>(size))) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", info_.rows - 1, " cannot be serialized"));
    }
    ++chunk.row_count;
    bytes_ += static_cast<int64_t>(size);
    if (chunk.rows.size() >= kChunkBytes) return CloseChunk();
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Dataset>> Finish() override {
    SDG_RETURN_IF_ERROR(CloseChunk());
    SDG_RETURN_IF_ERROR(Flush());
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_ASSIGN_OR_RETURN(pg::Transaction transaction,
                         pg::Transaction::Begin(*conn));
    SDG_RETURN_IF_ERROR(
        conn->Exec("UPDATE datasets SET row_count = $2, bytes = $3, "
                   "complete = true WHERE dataset = $1",
                   pg::Params().Int64(id_).Int64(info_.rows).Int64(bytes_),
                   "finishing a dataset")
            .status());
    SDG_RETURN_IF_ERROR(conn->Exec(kDropHolder, pg::Params().Text(holder_),
                                   "replacing a dataset")
                            .status());
    SDG_RETURN_IF_ERROR(
        conn->Exec("INSERT INTO dataset_holders (holder, dataset) "
                   "VALUES ($1, $2)",
                   pg::Params().Text(holder_).Int64(id_), "keeping a dataset")
            .status());
    SDG_RETURN_IF_ERROR(transaction.Commit());
    finished_ = true;
    return std::make_shared<PostgresDataset>(pool_, id_, info_.rows,
                                             max_outage_);
  }

 private:
  struct Chunk {
    int64_t first_row = 0;
    int32_t row_count = 0;
    std::string rows;
  };

  // Moves the open chunk, if it holds rows, to the batch to send.
  absl::Status CloseChunk() {
    if (open_chunk_.row_count == 0) return absl::OkStatus();
    const int64_t next_row = open_chunk_.first_row + open_chunk_.row_count;
    batch_bytes_ += open_chunk_.rows.size();
    batch_.push_back(std::move(open_chunk_));
    open_chunk_ = Chunk{next_row, 0, {}};
    if (batch_bytes_ >= kBatchBytes) return Flush();
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (batch_.empty()) return absl::OkStatus();
    std::vector<int64_t> first_rows;
    std::vector<int32_t> row_counts;
    std::vector<absl::string_view> rows;
    for (const Chunk& chunk : batch_) {
      first_rows.push_back(chunk.first_row);
      row_counts.push_back(chunk.row_count);
      rows.push_back(chunk.rows);
    }
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_RETURN_IF_ERROR(
        conn->Exec("INSERT INTO dataset_chunks (dataset, first_row, "
                   "row_count, rows) SELECT $1, * FROM "
                   "unnest($2::bigint[], $3::integer[], $4::bytea[])",
                   pg::Params()
                       .Int64(id_)
                       .Int64Array(first_rows)
                       .Int32Array(row_counts)
                       .BytesArray(rows),
                   "storing a dataset's rows")
            .status());
    batch_.clear();
    batch_bytes_ = 0;
    return absl::OkStatus();
  }

  const std::shared_ptr<pg::Pool> pool_;
  const std::string holder_;
  const int64_t id_;
  const absl::Duration max_outage_;
  Chunk open_chunk_;
  std::vector<Chunk> batch_;
  size_t batch_bytes_ = 0;
  int64_t bytes_ = 0;
  bool finished_ = false;
};

// A job record's columns, in the order RecordFrom reads them.
constexpr absl::string_view kJobColumns =
    "job_id, request, request_digest, state, create_ns, start_ns, end_ns, "
    "reason, resumed, finished, tenant, total_rows, total_shards, "
    "last_sequence, version";

JobRecord RecordFrom(const pg::Result& rows, int i) {
  JobRecord record;
  record.job_id = rows.String(i, 0);
  const absl::string_view request = rows.Bytes(i, 1);
  record.request.ParseFromArray(request.data(),
                                static_cast<int>(request.size()));
  record.request_digest = rows.String(i, 2);
  record.state = static_cast<v1::JobState>(rows.Int32(i, 3));
  record.create_time = FromNanos(rows.Int64(i, 4));
  record.start_time = FromNanos(rows.Int64(i, 5));
  record.end_time = FromNanos(rows.Int64(i, 6));
  record.reason = rows.String(i, 7);
  record.resumed = rows.Int32(i, 8);
  const absl::string_view finished = rows.Bytes(i, 9);
  record.finished.ParseFromArray(finished.data(),
                                 static_cast<int>(finished.size()));
  record.tenant = rows.String(i, 10);
  record.total_rows = rows.Int64(i, 11);
  record.total_shards = rows.Int64(i, 12);
  record.last_sequence = static_cast<uint64_t>(rows.Int64(i, 13));
  record.version = rows.Int64(i, 14);
  return record;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresJobStore>> PostgresJobStore::Open(
    Options options) {
  absl::Notification never;
  const absl::Notification& stop =
      options.replica_lease.has_value() &&
              options.replica_lease->stop_waiting != nullptr
          ? *options.replica_lease->stop_waiting
          : never;
  absl::Duration backoff = absl::Milliseconds(500);
  std::string last_error;
  for (;;) {
    absl::StatusOr<std::unique_ptr<PostgresJobStore>> store = OpenOnce(options);
    // (Back, it says "PostgreSQL store open" as at any start.)
    if (store.ok() || !options.wait_for_database ||
        !absl::IsUnavailable(store.status())) {
      return store;
    }
    const std::string error(store.status().message());
    if (error != last_error) {
      Log(LogLevel::kWarning,
          "waiting for PostgreSQL: it cannot be reached; trying again until "
          "it answers (not ready meanwhile)",
          {{"error", error}, {"retry_s", absl::ToDoubleSeconds(backoff)}});
      last_error = error;
    }
    if (stop.WaitForNotificationWithTimeout(backoff)) {
      return absl::CancelledError(
          absl::StrCat("stopped while waiting for PostgreSQL (", error, ")"));
    }
    backoff = std::min(backoff * 2, absl::Seconds(10));
  }
}

absl::StatusOr<std::unique_ptr<PostgresJobStore>> PostgresJobStore::OpenOnce(
    Options options) {
  SDG_RETURN_IF_ERROR(pg::CheckConninfo(options.conninfo));
  auto pool = std::make_shared<pg::Pool>(options.conninfo, options.pool_size);
  {
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool->Acquire());
    SDG_RETURN_IF_ERROR(MigrateSchema(*conn));
    SDG_RETURN_IF_ERROR(
        conn->Exec("DELETE FROM datasets WHERE NOT complete AND create_ns < $1",
                   pg::Params().Int64(
                       ToNanos(absl::Now() - kUnfinishedDatasetAge)),
                   "removing unfinished datasets")
            .status());
    Log(LogLevel::kInfo, "PostgreSQL store open",
        {{"database", conn->name()}, {"schema", LatestSchemaVersion()}});
  }
  // After migrating: the lease's table is in the schema.
  std::unique_ptr<ReplicaLease> lease;
  if (options.replica_lease.has_value()) {
    options.replica_lease->conninfo = options.conninfo;
    SDG_ASSIGN_OR_RETURN(
        lease, ReplicaLease::Acquire(*std::move(options.replica_lease)));
  }
  const absl::Duration max_outage = options.committer.max_outage;
  auto committer = std::make_unique<PostgresCommitter>(
      options.conninfo, std::move(options.committer), lease.get());
  return std::unique_ptr<PostgresJobStore>(new PostgresJobStore(
      std::move(pool), std::move(lease), std::move(committer), max_outage));
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> PostgresJobStore::NewBuilder(
    std::string holder) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  SDG_ASSIGN_OR_RETURN(
      pg::Result created,
      conn->Exec("INSERT INTO datasets (create_ns) VALUES ($1) "
                 "RETURNING dataset",
                 pg::Params().Int64(ToNanos(absl::Now())),
                 "starting a dataset"));
  return std::make_unique<PostgresDatasetBuilder>(
      pool_, std::move(holder), created.Int64(0, 0), max_outage_);
}

absl::Status PostgresJobStore::DropHolder(const std::string& holder) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  return conn
      ->Exec(kDropHolder, pg::Params().Text(holder), "removing a dataset")
      .status();
}

absl::StatusOr<std::shared_ptr<Dataset>> PostgresJobStore::OpenHeld(
    const std::string& holder) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  SDG_ASSIGN_OR_RETURN(
      pg::Result held,
      conn->Exec("SELECT d.dataset, d.row_count FROM dataset_holders h "
                 "JOIN datasets d ON d.dataset = h.dataset WHERE h.holder = $1",
                 pg::Params().Text(holder), "opening a dataset"));
  if (held.rows() == 0) return absl::NotFoundError(holder);
  return std::make_shared<PostgresDataset>(pool_, held.Int64(0, 0),
                                           held.Int64(0, 1), max_outage_);
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> PostgresJobStore::NewJobDataset(
    const std::string& job_id) {
  return NewBuilder(JobHolder(job_id));
}

absl::StatusOr<std::shared_ptr<Dataset>> PostgresJobStore::UseUploadedDataset(
    const std::string& dataset_id, const std::string& job_id) {
  {
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_ASSIGN_OR_RETURN(
        pg::Result shared,
        conn->Exec(
            "INSERT INTO dataset_holders (holder, dataset) "
            "SELECT $2, dataset FROM dataset_holders WHERE holder = $1 "
            "ON CONFLICT (holder) DO UPDATE SET dataset = "
            "EXCLUDED.dataset",
            pg::Params().Text(UploadHolder(dataset_id)).Text(JobHolder(job_id)),
            "giving a job its dataset"));
    if (shared.affected() == 0) return NoSuchUpload(dataset_id);
  }
  return OpenHeld(JobHolder(job_id));
}

void PostgresJobStore::DiscardJobDataset(const std::string& job_id) {
  (void)DropHolder(JobHolder(job_id));
}

absl::StatusOr<std::shared_ptr<Dataset>> PostgresJobStore::OpenJobDataset(
    const std::string& job_id) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      OpenHeld(JobHolder(job_id));
  if (absl::IsNotFound(dataset.status())) return NoJobDataset(job_id);
  return dataset;
}

absl::StatusOr<std::shared_ptr<Dataset>> PostgresJobStore::OpenUpload(
    const std::string& dataset_id) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      OpenHeld(UploadHolder(dataset_id));
  if (absl::IsNotFound(dataset.status())) return NoSuchUpload(dataset_id);
  return dataset;
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> PostgresJobStore::NewUpload(
    const std::string& dataset_id) {
  return NewBuilder(UploadHolder(dataset_id));
}

absl::Status PostgresJobStore::SaveUpload(const StoredDataset& dataset) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  return conn
      ->Exec(
          "INSERT INTO uploads (dataset_id, tenant, dataset, info, "
          "create_ns, expire_ns) VALUES ($1, $2, $3, $4, $5, $6)",
          pg::Params()
              .Text(dataset.dataset.dataset_id())
              .Text(dataset.tenant)
              .Bytes(dataset.dataset.SerializeAsString())
              .Text(dataset.info.ToJson())
              .Int64(ToNanos(dataset.create_time))
              .Int64(ExpireNanos(dataset.expire_time)),
          "saving an upload")
      .status();
}

void PostgresJobStore::DiscardUpload(const std::string& dataset_id) {
  (void)DropHolder(UploadHolder(dataset_id));
}

namespace {

// Row `row` of a query of (dataset, info, create_ns, tenant, expire_ns) as
// an upload.
absl::StatusOr<StoredDataset> UploadAt(const pg::Result& result, int row) {
  StoredDataset stored;
  const absl::string_view dataset = result.Bytes(row, 0);
  stored.dataset.ParseFromArray(dataset.data(),
                                static_cast<int>(dataset.size()));
  SDG_ASSIGN_OR_RETURN(stored.info,
                       DatasetInfo::FromJson(result.Bytes(row, 1)));
  stored.create_time = FromNanos(result.Int64(row, 2));
  stored.tenant = result.String(row, 3);
  stored.expire_time = ExpireTimeOf(result.Int64(row, 4));
  return stored;
}

}  // namespace

absl::StatusOr<StoredDataset> PostgresJobStore::FindUpload(
    const std::string& dataset_id) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  SDG_ASSIGN_OR_RETURN(
      pg::Result found,
      conn->Exec(
          "SELECT dataset, info, create_ns, tenant, expire_ns FROM uploads "
          "WHERE dataset_id = $1",
          pg::Params().Text(dataset_id), "reading an upload"));
  if (found.rows() == 0) return NoSuchUpload(dataset_id);
  return UploadAt(found, 0);
}

absl::StatusOr<std::vector<StoredDataset>> PostgresJobStore::ListUploads(
    const std::string& tenant) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  SDG_ASSIGN_OR_RETURN(
      pg::Result found,
      conn->Exec(
          "SELECT dataset, info, create_ns, tenant, expire_ns FROM uploads "
          "WHERE tenant = $1 ORDER BY create_ns, dataset_id",
          pg::Params().Text(tenant), "listing a tenant's uploads"));
  std::vector<StoredDataset> listed;
  for (int row = 0; row < found.rows(); ++row) {
    SDG_ASSIGN_OR_RETURN(StoredDataset upload, UploadAt(found, row));
    listed.push_back(std::move(upload));
  }
  return listed;
}

absl::Status PostgresJobStore::RemoveUpload(const std::string& dataset_id) {
  {
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_ASSIGN_OR_RETURN(
        pg::Result gone,
        conn->Exec("DELETE FROM uploads WHERE dataset_id = $1",
                   pg::Params().Text(dataset_id), "removing an upload"));
    if (gone.affected() == 0) return NoSuchUpload(dataset_id);
  }
  return DropHolder(UploadHolder(dataset_id));
}

absl::StatusOr<int> PostgresJobStore::PruneUploads(absl::Time cutoff) {
  std::vector<std::string> expired;
  {
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_ASSIGN_OR_RETURN(pg::Result gone,
                         conn->Exec("DELETE FROM uploads WHERE create_ns < $1 "
                                    "OR expire_ns < $2 RETURNING dataset_id",
                                    pg::Params()
                                        .Int64(ToNanos(cutoff))
                                        .Int64(absl::ToUnixNanos(absl::Now())),
                                    "removing expired uploads"));
    for (int i = 0; i < gone.rows(); ++i) expired.push_back(gone.String(i, 0));
  }
  for (const std::string& id : expired) {
    SDG_RETURN_IF_ERROR(DropHolder(UploadHolder(id)));
  }
  return static_cast<int>(expired.size());
}

absl::Status PostgresJobStore::WriteFenced(
    pg::Connection& conn, const char* doing,
    absl::FunctionRef<absl::Status()> write) {
  SDG_ASSIGN_OR_RETURN(pg::Transaction transaction,
                       pg::Transaction::Begin(conn));
  if (lease_ != nullptr) {
    pg::Params params;
    lease_->AddFenceParams(params);
    SDG_ASSIGN_OR_RETURN(pg::Result fence,
                         conn.Exec(absl::StrCat("WITH ", ReplicaLease::Fence(1),
                                                " SELECT 1 FROM fence"),
                                   params, "checking the replica lease"));
    if (fence.rows() == 0) return lease_->Lost(doing);
  }
  SDG_RETURN_IF_ERROR(write());
  return transaction.Commit();
}

absl::Status PostgresJobStore::AddJob(const JobRecord& record) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  return WriteFenced(*conn, "adding a job", [&] {
    return conn
        ->Exec(
            "INSERT INTO jobs (job_id, request, request_digest, state, "
            "create_ns, tenant) VALUES ($1, $2, $3, $4, $5, $6)",
            pg::Params()
                .Text(record.job_id)
                .Bytes(record.request.SerializeAsString())
                .Text(record.request_digest)
                .Int32(record.state)
                .Int64(ToNanos(record.create_time))
                .Text(record.tenant),
            "adding a job")
        .status();
  });
}

absl::Status PostgresJobStore::UpdateJob(const JobRecord& record) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  return WriteFenced(*conn, "saving a job's state", [&]() -> absl::Status {
    SDG_ASSIGN_OR_RETURN(
        pg::Result updated,
        conn->Exec("UPDATE jobs SET state = $2, start_ns = $3, end_ns = $4, "
                   "reason = $5, resumed = $6, finished = $7, "
                   "total_rows = $8, total_shards = $9, last_sequence = $10, "
                   "version = version + 1 WHERE job_id = $1 AND version = $11",

                   pg::Params()
                       .Text(record.job_id)
                       .Int32(record.state)
                       .Int64(ToNanos(record.start_time))
                       .Int64(ToNanos(record.end_time))
                       .Text(record.reason)
                       .Int32(record.resumed)
                       .Bytes(record.finished.SerializeAsString())
                       .Int64(record.total_rows)
                       .Int64(record.total_shards)
                       .Int64(static_cast<int64_t>(record.last_sequence))
                       .Int64(record.version),
                   "saving a job's state"));
    if (updated.affected() == 1) return absl::OkStatus();
    // Not saved: tell a job not stored from one saved by another writer.
    SDG_ASSIGN_OR_RETURN(
        pg::Result stored,
        conn->Exec("SELECT version FROM jobs WHERE job_id = $1",
                   pg::Params().Text(record.job_id),
                   "reading a job's version"));
    if (stored.rows() == 0) return NoSuchJob(record.job_id);
    return JobChanged(record.job_id, record.version, stored.Int64(0, 0));
  });
}

absl::Status PostgresJobStore::RemoveJob(const std::string& job_id) {
  {
    SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
    SDG_RETURN_IF_ERROR(WriteFenced(*conn, "removing a job", [&] {
      SDG_RETURN_IF_ERROR(conn->Exec("DELETE FROM jobs WHERE job_id = $1",
                                     pg::Params().Text(job_id),
                                     "removing a job")
                              .status());
      return conn
          ->Exec("DELETE FROM job_events WHERE job_id = $1",
                 pg::Params().Text(job_id), "removing a job's events")
          .status();
    }));
  }
  return DropHolder(JobHolder(job_id));
}

absl::StatusOr<std::vector<JobRecord>> PostgresJobStore::LoadJobs() {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  SDG_ASSIGN_OR_RETURN(pg::Result rows,
                       conn->Exec(absl::StrCat("SELECT ", kJobColumns,
                                               " FROM jobs ORDER BY added"),
                                  "loading the jobs"));
  std::vector<JobRecord> records;
  records.reserve(rows.rows());
  for (int i = 0; i < rows.rows(); ++i) records.push_back(RecordFrom(rows, i));
  return records;
}

absl::StatusOr<std::vector<JobRecord>> PostgresJobStore::LoadJobsById(
    absl::Span<const std::string> job_ids) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  std::vector<absl::string_view> ids(job_ids.begin(), job_ids.end());
  SDG_ASSIGN_OR_RETURN(
      pg::Result rows,
      conn->Exec(absl::StrCat("SELECT ", kJobColumns,
                              " FROM jobs WHERE job_id = ANY($1)"),
                 pg::Params().TextArray(ids), "loading jobs"));
  absl::flat_hash_map<std::string, JobRecord> by_id;
  for (int i = 0; i < rows.rows(); ++i) {
    JobRecord record = RecordFrom(rows, i);
    std::string job_id = record.job_id;
    by_id.emplace(std::move(job_id), std::move(record));
  }
  std::vector<JobRecord> records;
  records.reserve(by_id.size());
  for (const std::string& job_id : job_ids) {
    auto it = by_id.find(job_id);
    if (it != by_id.end()) records.push_back(std::move(it->second));
  }
  return records;
}

absl::StatusOr<std::shared_ptr<EventLog>> PostgresJobStore::OpenJobLog(
    const std::string& job_id,
    absl::FunctionRef<void(const LogEvent&)> replay) {
  // Replays what is committed, a page at a time, through a finished log's
  // reader; the log that appends then numbers on from there.
  std::shared_ptr<PostgresEventLog> stored =
      PostgresEventLog::OpenFinished(pool_, job_id);
  SDG_ASSIGN_OR_RETURN(std::unique_ptr<EventLog::Reader> reader,
                       stored->Read(0));
  LogEvent event;
  while (true) {
    SDG_ASSIGN_OR_RETURN(std::optional<EventLog::EncodedEvent> next,
                         reader->Next());
    if (!next.has_value()) break;
    if (!event.ParseFromString(next->bytes)) {
      return absl::DataLossError(absl::StrCat("PostgreSQL: job ", job_id,
                                              "'s event ", next->sequence,
                                              " is damaged"));
    }
    replay(event);
  }
  return PostgresEventLog::Open(pool_, *committer_, job_id,
                                reader->last_read());
}

std::shared_ptr<EventLog> PostgresJobStore::OpenFinishedJobLog(
    const std::string& job_id) {
  return PostgresEventLog::OpenFinished(pool_, job_id);
}

absl::StatusOr<StorageUsage> PostgresJobStore::TenantUsage(
    const std::string& tenant) {
  SDG_ASSIGN_OR_RETURN(pg::Pool::Lease conn, pool_->Acquire());
  // A job's dataset shared with an upload of the tenant counts once, with
  // the upload.
  SDG_ASSIGN_OR_RETURN(
      pg::Result usage,
      conn->Exec(
          "WITH upload_sets AS (SELECT DISTINCT h.dataset FROM uploads u "
          "JOIN dataset_holders h ON h.holder = 'upload:' || u.dataset_id "
          "WHERE u.tenant = $1), "
          "job_sets AS (SELECT DISTINCT h.dataset FROM jobs j "
          "JOIN dataset_holders h ON h.holder = 'job:' || j.job_id "
          "WHERE j.tenant = $1 AND h.dataset NOT IN "
          "(SELECT dataset FROM upload_sets)) "
          "SELECT (SELECT COALESCE(sum(bytes), 0) FROM datasets WHERE "
          "dataset IN (SELECT dataset FROM upload_sets))::bigint, "
          "(SELECT COALESCE(sum(bytes), 0) FROM datasets WHERE "
          "dataset IN (SELECT dataset FROM job_sets))::bigint, "
          "(SELECT COALESCE(sum(octet_length(e.event)), 0) FROM job_events e "
          "JOIN jobs j ON j.job_id = e.job_id WHERE j.tenant = $1)::bigint",
          pg::Params().Text(tenant), "counting a tenant's storage"));
  StorageUsage result;
  result.upload_bytes = usage.Int64(0, 0);
  result.dataset_bytes = usage.Int64(0, 1);
  result.result_bytes = usage.Int64(0, 2);
  return result;
}

}  // namespace sdg
