#include "server/store/replica_lease.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "server/store/event_log.h"

namespace sdg {
namespace {

// Takes the lease if it is free: released, expired, or never taken.
constexpr const char* kTake =
    "UPDATE sdg_replica_lease SET owner = $1, epoch = epoch + 1, "
    "expires_at = clock_timestamp() + $2::bigint * interval '1 millisecond' "
    "WHERE id = 1 AND (owner IS NULL OR expires_at < clock_timestamp()) "
    "RETURNING epoch";
// Who holds it, and for how many more milliseconds.
constexpr const char* kHolder =
    "SELECT COALESCE(owner, ''), epoch, COALESCE(ceil(1000 * extract(epoch "
    "FROM expires_at - clock_timestamp())), 0)::bigint "
    "FROM sdg_replica_lease WHERE id = 1";
constexpr const char* kRenew =
    "UPDATE sdg_replica_lease SET expires_at = clock_timestamp() + "
    "$3::bigint * interval '1 millisecond' "
    "WHERE id = 1 AND owner = $1 AND epoch = $2";
// Releases it and wakes the standbys (they LISTEN: kListen); PostgreSQL
// sends the notification when the release commits.
constexpr const char* kRelease =
    "WITH released AS (UPDATE sdg_replica_lease SET owner = NULL, "
    "expires_at = NULL WHERE id = 1 AND owner = $1 AND epoch = $2 "
    "RETURNING 1) SELECT pg_notify('sdg_replica_lease_released', '') "
    "FROM released";
constexpr const char* kListen = "LISTEN sdg_replica_lease_released";
// Says $1 is alive as $2 ('active' or 'standby') for $3 ms, drops the rows
// of replicas gone for a day, and counts the others alive (the count's
// snapshot does not see this statement's own writes, hence `<> $1`).
constexpr const char* kHeartbeat =
    "WITH beat AS (INSERT INTO sdg_replicas (replica, role, seen_at, ttl_ms) "
    "VALUES ($1, $2, clock_timestamp(), $3) ON CONFLICT (replica) DO UPDATE "
    "SET role = excluded.role, seen_at = excluded.seen_at, "
    "ttl_ms = excluded.ttl_ms), "
    "gone AS (DELETE FROM sdg_replicas "
    "WHERE seen_at < clock_timestamp() - interval '1 day') "
    "SELECT count(*) FILTER (WHERE role = 'active')::integer, "
    "count(*) FILTER (WHERE role = 'standby')::integer FROM sdg_replicas "
    "WHERE replica <> $1 AND "
    "seen_at + ttl_ms * interval '1 millisecond' > clock_timestamp()";
constexpr const char* kGone = "DELETE FROM sdg_replicas WHERE replica = $1";
// How often a standby waiting for a release looks at stop_waiting.
constexpr absl::Duration kStopCheck = absl::Milliseconds(100);

// The lease's length in whole milliseconds, as the statements take it.
int64_t TtlMilliseconds(absl::Duration ttl) {
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(ttl));
}

}  // namespace

std::string ReplicaLease::DefaultReplicaName() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return absl::StrCat(host.data(), ":", getpid());
}

std::string ReplicaLease::Fence(int first_param) {
  return absl::StrCat(
      "fence AS (SELECT 1 FROM sdg_replica_lease WHERE id = 1 AND owner = $",
      first_param, " AND epoch = $", first_param + 1, " FOR SHARE)");
}

void ReplicaLease::AddFenceParams(pg::Params& params) const {
  params.Text(options_.replica).Int64(epoch_);
}

void ReplicaLease::Heartbeat(pg::Connection& conn, const Options& options,
                             const char* role) {
  absl::StatusOr<pg::Result> others =
      conn.Exec(kHeartbeat,
                pg::Params()
                    .Text(options.replica)
                    .Text(role)
                    .Int64(TtlMilliseconds(options.ttl)),
                "saying this replica is alive");
  // A database out of reach is reported by the lease's renewal (or the
  // standby's next look); the next heartbeat tries again.
  if (!others.ok() || options.on_heartbeat == nullptr) return;
  LiveReplicas live{others->Int32(0, 0), others->Int32(0, 1)};
  ++(std::string_view(role) == "active" ? live.active : live.standby);
  options.on_heartbeat(live);
}

void ReplicaLease::SayGone(pg::Connection& conn, const std::string& replica) {
  (void)conn.Exec(kGone, pg::Params().Text(replica),
                  "removing this replica's heartbeat");
}

absl::StatusOr<std::unique_ptr<ReplicaLease>> ReplicaLease::Acquire(
    Options options) {
  if (options.replica.empty()) options.replica = DefaultReplicaName();
  SDG_ASSIGN_OR_RETURN(std::unique_ptr<pg::Connection> conn,
                       pg::Connection::Open(options.conninfo));
  SDG_RETURN_IF_ERROR(
      conn->Exec(kListen, "listening for the replica lease's release")
          .status());
  const int64_t ttl_ms = TtlMilliseconds(options.ttl);
  absl::Notification never;
  const absl::Notification& stop =
      options.stop_waiting != nullptr ? *options.stop_waiting : never;
  bool told = false;
  for (;;) {
    SDG_ASSIGN_OR_RETURN(
        pg::Result taken,
        conn->Exec(kTake, pg::Params().Text(options.replica).Int64(ttl_ms),
                   "taking the replica lease"));
    if (taken.rows() == 1) {
      const int64_t epoch = taken.Int64(0, 0);
      SDG_RETURN_IF_ERROR(
          conn->Exec("UNLISTEN *", "no longer listening for releases")
              .status());
      Log(LogLevel::kInfo,
          "replica lease taken: this replica is the active one",
          {{"replica", options.replica}, {"epoch", epoch}});
      return std::unique_ptr<ReplicaLease>(
          new ReplicaLease(std::move(options), std::move(conn), epoch));
    }
    SDG_ASSIGN_OR_RETURN(pg::Result holder,
                         conn->Exec(kHolder, "reading the replica lease"));
    const std::string owner = holder.String(0, 0);
    const int64_t left_ms = holder.Int64(0, 2);
    if (!told) {
      told = true;
      Log(LogLevel::kInfo,
          "standby: another replica holds the lease; taking over when it "
          "releases it or it expires",
          {{"replica", options.replica},
           {"active", owner},
           {"epoch", holder.Int64(0, 1)}});
      if (options.on_standby) options.on_standby(owner);
    }
    Heartbeat(*conn, options, "standby");
    // Look again when the lease is released (a notification), when it
    // expires, and at least every third of a lease.
    const absl::Time look_again =
        absl::Now() + std::clamp(absl::Milliseconds(left_ms),
                                 absl::Milliseconds(10), options.ttl / 3);
    for (absl::Time now = absl::Now(); now < look_again; now = absl::Now()) {
      if (stop.HasBeenNotified()) {
        SayGone(*conn, options.replica);
        return absl::CancelledError(absl::StrCat(
            "stopped while a standby (", owner, " holds the replica lease)"));
      }
      SDG_ASSIGN_OR_RETURN(
          const bool released,
          conn->AwaitNotification(std::min(look_again - now, kStopCheck)));
      if (released) break;
    }
  }
}

ReplicaLease::ReplicaLease(Options options,
                           std::unique_ptr<pg::Connection> conn, int64_t epoch)
    : options_(std::move(options)), epoch_(epoch), conn_(std::move(conn)) {
  renewer_ = std::thread([this] { RenewLoop(); });
}

ReplicaLease::~ReplicaLease() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  renewer_.join();
  bool lost;
  {
    absl::MutexLock lock(&mu_);
    lost = lost_;
  }
  if (conn_->ok()) SayGone(*conn_, options_.replica);
  if (lost) return;
  absl::Status released =
      Exec(kRelease, pg::Params().Text(options_.replica).Int64(epoch_),
           "releasing the replica lease")
          .status();
  if (released.ok()) {
    Log(LogLevel::kInfo, "replica lease released",
        {{"replica", options_.replica}, {"epoch", epoch_}});
  } else {
    Log(LogLevel::kWarning,
        "could not release the replica lease; a standby takes over when it "
        "expires",
        {{"error", std::string(released.message())}});
  }
}

void ReplicaLease::RenewLoop() {
  const int64_t ttl_ms = TtlMilliseconds(options_.ttl);
  bool failing = false;
  Heartbeat(*conn_, options_, "active");
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]()
                          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.ttl / 3)) {
        return;
      }
    }
    absl::StatusOr<pg::Result> renewed = Exec(
        kRenew, pg::Params().Text(options_.replica).Int64(epoch_).Int64(ttl_ms),
        "renewing the replica lease");
    if (!renewed.ok()) {
      // The database is unreachable from here. Nothing this replica writes
      // commits meanwhile (each write is fenced by the same lease). If the
      // database is up for others (a partition) and the lease expires, a
      // standby takes over, and the renewal after the reconnect finds the
      // lease lost. Keep trying.
      if (!failing) {
        Log(LogLevel::kWarning, "cannot renew the replica lease; retrying",
            {{"error", std::string(renewed.status().message())}});
      }
      failing = true;
      continue;
    }
    failing = false;
    if (renewed->affected() == 0) {
      (void)Lost("renewing the replica lease");
      return;
    }
    Heartbeat(*conn_, options_, "active");
  }
}

absl::StatusOr<pg::Result> ReplicaLease::Exec(absl::string_view sql,
                                              const pg::Params& params,
                                              const char* doing) {
  if (!conn_->ok()) SDG_RETURN_IF_ERROR(conn_->Reset());
  return conn_->Exec(sql, params, doing);
}

absl::Status ReplicaLease::Lost(const char* doing) {
  absl::Status error = FencedOutError(absl::StrCat(
      "this replica (", options_.replica, ", epoch ", epoch_,
      ") no longer holds the replica lease: another sdgd took over its jobs; ",
      doing, " was refused"));
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = !lost_;
    lost_ = true;
  }
  if (first) {
    Log(LogLevel::kError, "replica lease lost",
        {{"replica", options_.replica}, {"epoch", epoch_}, {"while", doing}});
    if (options_.on_lost) options_.on_lost(error);
  }
  return error;
}

}  // namespace sdg
