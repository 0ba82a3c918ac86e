// Who a call comes from, as the service sees it: a tenant (named by the
// caller's bearer token, server/api/authenticator.h), which owns the jobs
// and uploads it makes, or the admin, who sees every tenant's.
#ifndef SDG_SERVER_SERVICE_CALLER_H_
#define SDG_SERVER_SERVICE_CALLER_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sdg {

struct Caller {
  // "" when authentication is off.
  std::string tenant;
  // Sees, cancels and deletes every tenant's jobs.
  bool admin = false;

  bool Owns(absl::string_view job_tenant) const {
    return admin || job_tenant == tenant;
  }
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_CALLER_H_
