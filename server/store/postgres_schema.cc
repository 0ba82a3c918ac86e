#include "server/store/postgres_schema.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace sdg {
namespace {

// Never edit a migration that has shipped: add the next one.
constexpr const char* kMigrations[] = {
    // 1: records, datasets and uploads, event logs.
    R"sql(
CREATE TABLE jobs (
  added bigserial NOT NULL,
  job_id text PRIMARY KEY,
  tenant text NOT NULL,
  request bytea NOT NULL,
  request_digest text NOT NULL,
  state integer NOT NULL,
  create_ns bigint NOT NULL,
  start_ns bigint NOT NULL DEFAULT 0,
  end_ns bigint NOT NULL DEFAULT 0,
  reason text NOT NULL DEFAULT '',
  resumed integer NOT NULL DEFAULT 0,
  finished bytea NOT NULL DEFAULT '');
CREATE INDEX jobs_by_tenant ON jobs (tenant);
CREATE INDEX jobs_by_added ON jobs (added);

-- Rows of uploads and of jobs' datasets. A dataset is complete once its
-- builder finished; a job that names an upload shares its dataset.
CREATE TABLE datasets (
  dataset bigserial PRIMARY KEY,
  row_count bigint NOT NULL DEFAULT 0,
  bytes bigint NOT NULL DEFAULT 0,
  complete boolean NOT NULL DEFAULT false,
  create_ns bigint NOT NULL);
CREATE TABLE dataset_rows (
  dataset bigint NOT NULL REFERENCES datasets ON DELETE CASCADE,
  row_index bigint NOT NULL,
  row bytea NOT NULL,
  PRIMARY KEY (dataset, row_index));
-- Who holds a dataset: 'upload:ID' or 'job:ID'. A dataset is removed with
-- its last holder.
CREATE TABLE dataset_holders (
  holder text PRIMARY KEY,
  dataset bigint NOT NULL REFERENCES datasets);
CREATE INDEX dataset_holders_by_dataset ON dataset_holders (dataset);

CREATE TABLE uploads (
  dataset_id text PRIMARY KEY,
  tenant text NOT NULL,
  dataset bytea NOT NULL,
  info text NOT NULL,
  create_ns bigint NOT NULL);
CREATE INDEX uploads_by_create ON uploads (create_ns);
CREATE INDEX uploads_by_tenant ON uploads (tenant);

-- One row per event, numbered densely per job.
CREATE TABLE job_events (
  job_id text NOT NULL,
  sequence bigint NOT NULL,
  event_case integer NOT NULL,
  event bytea NOT NULL,
  PRIMARY KEY (job_id, sequence));
)sql",
    // 2: the replica lease: which of the replicas sharing the store is the
    // active one (replica_lease.h).
    R"sql(
CREATE TABLE sdg_replica_lease (
  id integer PRIMARY KEY CHECK (id = 1),
  owner text,
  epoch bigint NOT NULL DEFAULT 0,
  expires_at timestamptz);
INSERT INTO sdg_replica_lease (id) VALUES (1);
)sql",
    // 3: datasets in chunks of rows: one table row per ~64 KiB of dataset
    // rows rather than one per dataset row, so that an upload costs the
    // database a few hundred index entries, not hundreds of thousands. A
    // chunk's rows are each a 4-byte big-endian length, then the row. The
    // rows of version 1 become chunks of one row each. Chunks are
    // compressed with lz4 where the server has it (pglz is several times
    // slower to write).
    R"sql(
CREATE TABLE dataset_chunks (
  dataset bigint NOT NULL REFERENCES datasets ON DELETE CASCADE,
  first_row bigint NOT NULL,
  row_count integer NOT NULL,
  rows bytea NOT NULL,
  PRIMARY KEY (dataset, first_row));
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_settings
             WHERE name = 'default_toast_compression'
             AND 'lz4' = ANY (enumvals)) THEN
    ALTER TABLE dataset_chunks ALTER COLUMN rows SET COMPRESSION lz4;
  END IF;
END $$;
INSERT INTO dataset_chunks (dataset, first_row, row_count, rows)
  SELECT dataset, row_index, 1, int4send(octet_length(row)) || row
  FROM dataset_rows;
DROP TABLE dataset_rows;
)sql",
    // 4: every replica sharing the store, active or standby, and when it
    // last said it was alive (replica_lease.h).
    R"sql(
CREATE TABLE sdg_replicas (
  replica text PRIMARY KEY,
  role text NOT NULL CHECK (role IN ('active', 'standby')),
  seen_at timestamptz NOT NULL,
  ttl_ms bigint NOT NULL);
)sql",
    // 5: what describes an ended job without its events or dataset
    // (JobRecord).
    R"sql(
ALTER TABLE jobs ADD COLUMN total_rows bigint NOT NULL DEFAULT 0,
                 ADD COLUMN total_shards bigint NOT NULL DEFAULT 0,
                 ADD COLUMN last_sequence bigint NOT NULL DEFAULT 0;
)sql",
    // 6: the record's version, for UpdateJob's compare and set (JobRecord).
    R"sql(
ALTER TABLE jobs ADD COLUMN version bigint NOT NULL DEFAULT 1;
)sql",
    // 7: when an upload goes whatever the retention (a batch's
    // output_expires_after); the largest bigint for none.
    R"sql(
ALTER TABLE uploads ADD COLUMN expire_ns bigint NOT NULL
  DEFAULT 9223372036854775807;
)sql",
};

// pg_advisory_lock's key: "sdgd" in ASCII.
constexpr int64_t kMigrationLock = 0x73646764;

}  // namespace

int LatestSchemaVersion() { return static_cast<int>(std::size(kMigrations)); }

absl::Status MigrateSchema(pg::Connection& conn, int target) {
  SDG_RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_lock($1)",
                                pg::Params().Int64(kMigrationLock),
                                "locking the schema")
                          .status());
  auto migrate = [&]() -> absl::Status {
    SDG_RETURN_IF_ERROR(
        conn.Exec("CREATE TABLE IF NOT EXISTS sdg_schema_migrations ("
                  "version integer PRIMARY KEY, "
                  "applied_at timestamptz NOT NULL DEFAULT now())",
                  "creating the migrations table")
            .status());
    SDG_ASSIGN_OR_RETURN(pg::Result current,
                         conn.Exec("SELECT COALESCE(max(version), 0)::integer "
                                   "FROM sdg_schema_migrations",
                                   "reading the schema version"));
    const int version = current.Int32(0, 0);
    if (version > LatestSchemaVersion()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "PostgreSQL (", conn.name(), "): the schema is at version ", version,
          ", newer than this sdgd's ", LatestSchemaVersion(),
          "; run the newer sdgd (downgrades are not supported)"));
    }
    for (int next = version + 1; next <= target; ++next) {
      SDG_ASSIGN_OR_RETURN(pg::Transaction transaction,
                           pg::Transaction::Begin(conn));
      SDG_RETURN_IF_ERROR(
          conn.ExecScript(kMigrations[next - 1], "migrating the schema"));
      SDG_RETURN_IF_ERROR(
          conn.Exec("INSERT INTO sdg_schema_migrations (version) VALUES ($1)",
                    pg::Params().Int32(next), "recording the schema version")
              .status());
      SDG_RETURN_IF_ERROR(transaction.Commit());
      Log(LogLevel::kInfo, "PostgreSQL: schema migrated",
          {{"database", conn.name()}, {"version", next}});
    }
    return absl::OkStatus();
  };
  absl::Status status = migrate();
  (void)conn.Exec("SELECT pg_advisory_unlock($1)",
                  pg::Params().Int64(kMigrationLock), "unlocking the schema");
  return status;
}

}  // namespace sdg
