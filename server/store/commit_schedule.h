// When a group committer's next round may start, and how long its commits
// have been failing: the pacing and outage bookkeeping that the file log's
// committer and the database's share. A store that cannot commit (a full
// disk, a database that is down) pauses its jobs and retries with backoff;
// past `max_outage` the logs that still fail fail for good.
#ifndef SDG_SERVER_STORE_COMMIT_SCHEDULE_H_
#define SDG_SERVER_STORE_COMMIT_SCHEDULE_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sdg {

struct CommitterOptions {
  // At most one round per `min_round_interval`: a busy server then commits
  // a few hundred times a second, each time for everything pending,
  // instead of once per shard; an event waits at most that long.
  absl::Duration min_round_interval = absl::Milliseconds(5);
  // How long commits may keep failing before their logs fail (zero: at the
  // first failure).
  absl::Duration max_outage = absl::Minutes(5);
  absl::Duration retry_backoff = absl::Milliseconds(100);
  absl::Duration max_retry_backoff = absl::Seconds(5);
  // Runs on the committer's thread when committing stops working (false,
  // with the first error) and when it works again (true, OK).
  std::function<void(bool up, const absl::Status& error)> on_health;
};

class CommitSchedule {
 public:
  // `store` names the store in log lines ("event log", "PostgreSQL").
  CommitSchedule(CommitterOptions options, std::string store);

  // After a round: notes an outage starting or ending (a log line and
  // on_health); returns when the next round may start.
  absl::Time AfterRound(const absl::Status& error);
  // True once commits have failed for max_outage: the next round is the
  // last try for what still fails.
  bool OutageOver() const;
  // False while commits are failing and being retried.
  bool up() const;
  const CommitterOptions& options() const { return options_; }

 private:
  const CommitterOptions options_;
  const std::string store_;
  mutable absl::Mutex mu_;
  // Since when commits fail (InfinitePast: they work), and the next wait.
  absl::Time failing_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_STORE_COMMIT_SCHEDULE_H_
