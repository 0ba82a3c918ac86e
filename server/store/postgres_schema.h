// The PostgreSQL store's schema, versioned: each migration runs once, in
// order, in its own transaction, recorded in sdg_schema_migrations. Replicas
// starting at once take an advisory lock first, so one of them migrates and
// the others find the work done.
#ifndef SDG_SERVER_STORE_POSTGRES_SCHEMA_H_
#define SDG_SERVER_STORE_POSTGRES_SCHEMA_H_

#include "absl/status/status.h"
#include "server/store/postgres.h"

namespace sdg {

// The version the code expects.
int LatestSchemaVersion();

// Applies the migrations after the database's version, up to `target`
// (tests start from an older schema). FAILED_PRECONDITION for a database
// newer than this sdgd (a downgrade).
absl::Status MigrateSchema(pg::Connection& conn,
                           int target = LatestSchemaVersion());

}  // namespace sdg

#endif  // SDG_SERVER_STORE_POSTGRES_SCHEMA_H_
