// Which of the sdgd replicas sharing one PostgreSQL store is the active
// one: the replica that holds the lease (one row: owner, epoch, expiry in
// the database's clock). The others are standbys: they wait, and the first
// to see the lease released or expired takes it with the next epoch and
// resumes every job from what is committed. The active renews the lease
// every third of its length; SIGTERM releases it, and the release wakes
// the standbys at once (LISTEN/NOTIFY); kill -9 hands it over when it
// expires.
//
// Fencing: every write of the active (event commits, job records) checks,
// in the same statement, that the lease is still its own at its epoch, and
// holds the lease row shared while it writes; a takeover updates that row,
// so it waits for writes in flight, and none committed after it passes.
// A replica that finds itself fenced out hears it once (on_lost) and is
// to stop at once: another replica is running its jobs.
//
// Heartbeats: every replica, active or standby, says it is alive in
// sdg_replicas every third of its lease, and counts the replicas seen
// alive within their own lease length (on_heartbeat); it removes its row
// when it stops.
#ifndef SDG_SERVER_STORE_REPLICA_LEASE_H_
#define SDG_SERVER_STORE_REPLICA_LEASE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/store/postgres.h"

namespace sdg {

class ReplicaLease {
 public:
  // Replicas the heartbeat table shows alive, this one included.
  struct LiveReplicas {
    int active = 0;
    int standby = 0;
    bool operator==(const LiveReplicas&) const = default;
  };

  struct Options {
    std::string conninfo;
    // This replica's name in the lease and in logs (default: host:pid).
    std::string replica;
    // How long the lease lasts unrenewed: how long a standby waits after
    // the active dies.
    absl::Duration ttl = absl::Seconds(10);
    // Runs once (any thread) when the lease is found to be another's.
    std::function<void(const absl::Status&)> on_lost;
    // Ends a standby's wait (Acquire returns CANCELLED), e.g. on SIGTERM.
    const absl::Notification* stop_waiting = nullptr;
    // Runs once if Acquire has to wait, naming the holder.
    std::function<void(const std::string& holder)> on_standby;
    // Runs after each heartbeat that reached the database (the renewing
    // thread, or Acquire's while a standby).
    std::function<void(const LiveReplicas&)> on_heartbeat;
  };

  // Takes the lease, waiting as a standby while another replica holds it.
  // The schema must be migrated. UNAVAILABLE when the database cannot be
  // reached; CANCELLED when stop_waiting was notified first.
  static absl::StatusOr<std::unique_ptr<ReplicaLease>> Acquire(Options options);
  // Stops renewing and releases the lease (unless it was lost).
  ~ReplicaLease();
  ReplicaLease(const ReplicaLease&) = delete;
  ReplicaLease& operator=(const ReplicaLease&) = delete;

  const std::string& replica() const { return options_.replica; }
  int64_t epoch() const { return epoch_; }

  // The fence, as a common table expression for a writing statement:
  // `WITH fence AS (...) <statement> ... WHERE EXISTS (SELECT 1 FROM
  // fence)`. It takes two parameters, $N (the owner) and $N+1 (the epoch):
  // Fence(N).
  static std::string Fence(int first_param);
  // Adds the fence's parameters to `params`.
  void AddFenceParams(pg::Params& params) const;
  // For a writer whose fence found the lease gone: the error to return,
  // after running on_lost (once).
  absl::Status Lost(const char* doing);

  // The replica's default name: host name and process id.
  static std::string DefaultReplicaName();

 private:
  ReplicaLease(Options options, std::unique_ptr<pg::Connection> conn,
               int64_t epoch);
  // The renewing thread: renews every ttl/3 until the destructor.
  void RenewLoop();
  // Says `options.replica` is alive in `role` on `conn`, and reports the
  // replicas alive to on_heartbeat. A failure is ignored (the renewal
  // reports a database out of reach): the lease, not the heartbeat,
  // decides who runs the jobs.
  static void Heartbeat(pg::Connection& conn, const Options& options,
                        const char* role);
  // Removes `replica`'s heartbeat row (it is stopping).
  static void SayGone(pg::Connection& conn, const std::string& replica);
  // On conn_, reconnecting first if the database dropped it.
  absl::StatusOr<pg::Result> Exec(absl::string_view sql,
                                  const pg::Params& params, const char* doing);

  const Options options_;
  const int64_t epoch_;
  // The renewer's connection (its thread's alone once it runs).
  std::unique_ptr<pg::Connection> conn_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_REPLICA_LEASE_H_
