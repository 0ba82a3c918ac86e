// The events a job's log holds (sdg.store.v1.LogEvent): sdg.v1.JobEvent's
// cases plus the log-only stage_rows.
#ifndef SDG_SERVER_STORE_LOG_EVENT_H_
#define SDG_SERVER_STORE_LOG_EVENT_H_

#include "sdg/store/v1/log_event.pb.h"

namespace sdg {

using LogEvent = store::v1::LogEvent;

}  // namespace sdg

#endif  // SDG_SERVER_STORE_LOG_EVENT_H_
