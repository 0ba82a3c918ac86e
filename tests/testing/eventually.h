// Waiting for state another process or thread owns, which a test can only
// watch. The bound turns a hang into a failure; it is never the assertion.
#ifndef SDG_TESTS_TESTING_EVENTUALLY_H_
#define SDG_TESTS_TESTING_EVENTUALLY_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sdg::testing {

inline bool Eventually(const std::function<bool()>& condition,
                       absl::Duration bound = absl::Seconds(60)) {
  absl::Time deadline = absl::Now() + bound;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_EVENTUALLY_H_
