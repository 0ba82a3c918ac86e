// Whether a backend is down, and when to ask it again: the outage state
// that Backend acts on, beside RetryPolicy. Pure: no clock (the time is
// passed in), no I/O, no lock (Backend holds it under its own).
//
// A backend goes down when detection finds no server, or when every
// endpoint has failed `failures` attempts in a row with a sign of a server
// that is not there (Backend decides that from its EndpointPool). While it
// is down, one call at a time probes it, the first probe `first_probe`
// after it went down and each next one after twice the wait, up to
// `max_probe_interval`; detection that finds no server is asked again on
// the same doubling. Past `limit` of being down the waiting calls fail.
#ifndef SDG_SERVER_BACKEND_OUTAGE_DETECTOR_H_
#define SDG_SERVER_BACKEND_OUTAGE_DETECTOR_H_

#include <algorithm>

#include "absl/time/time.h"

namespace sdg {

class OutageDetector {
 public:
  struct Options {
    int failures = 5;  // per endpoint, in a row
    // Waiting calls fail after this; zero turns outage handling off.
    absl::Duration limit = absl::Minutes(10);
    absl::Duration first_probe = absl::Milliseconds(250);
    absl::Duration max_probe_interval = absl::Seconds(5);
  };

  explicit OutageDetector(const Options& options)
      : options_(options), detect_interval_(options.first_probe) {}

  const Options& options() const { return options_; }
  // Outage handling is on: calls wait out an outage rather than fail.
  bool enabled() const { return options_.limit > absl::ZeroDuration(); }

  bool down() const { return down_since_ != absl::InfiniteFuture(); }
  // InfiniteFuture while up.
  absl::Time down_since() const { return down_since_; }
  // When the waiting calls fail: `limit` after it went down.
  absl::Time limit_at() const { return down_since_ + options_.limit; }
  bool PastLimit(absl::Time now) const { return down() && now >= limit_at(); }

  // Down from `now`, the first probe due `first_probe` later; false (and
  // nothing changes) if it already was.
  bool GoDown(absl::Time now) {
    if (down()) return false;
    down_since_ = now;
    probes_failed_ = 0;
    probe_interval_ = options_.first_probe;
    next_probe_ = now + probe_interval_;
    return true;
  }
  // Up again; false if it was not down.
  bool ComeUp() {
    if (!down()) return false;
    down_since_ = absl::InfiniteFuture();
    return true;
  }

  // While down: when the next probe may go, at the latest at the limit
  // (when the waiting calls fail and the backend is looked at again).
  absl::Time next_probe() const { return std::min(next_probe_, limit_at()); }
  bool ProbeDue(absl::Time now) const { return now >= next_probe_; }
  // The probe sent failed at `now`: the next waits twice as long.
  void ProbeFailed(absl::Time now) {
    ++probes_failed_;
    probe_interval_ = Doubled(probe_interval_);
    next_probe_ = now + probe_interval_;
  }
  int probes_failed() const { return probes_failed_; }
  absl::Duration probe_interval() const { return probe_interval_; }

  // Detection found no server: how long until it is asked again. Each
  // failure in a row doubles the wait, up to max_probe_interval.
  absl::Duration DetectionFailed() {
    const absl::Duration wait = detect_interval_;
    detect_interval_ = Doubled(detect_interval_);
    return wait;
  }
  // Detection found a server: the next failure waits first_probe again.
  void DetectionAnswered() { detect_interval_ = options_.first_probe; }

 private:
  absl::Duration Doubled(absl::Duration interval) const {
    return std::min(interval * 2, options_.max_probe_interval);
  }

  const Options options_;
  absl::Time down_since_ = absl::InfiniteFuture();
  absl::Time next_probe_ = absl::InfinitePast();
  absl::Duration probe_interval_;
  int probes_failed_ = 0;
  absl::Duration detect_interval_;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_OUTAGE_DETECTOR_H_
