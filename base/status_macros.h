// Early returns for absl::Status and absl::StatusOr, where a function has
// several fallible steps in a row:
//   SDG_RETURN_IF_ERROR(store.AddJob(record));
//   SDG_ASSIGN_OR_RETURN(std::shared_ptr<Dataset> rows, OpenRows(id));
// Each returns the failed step's status unchanged (add context before, with
// an explicit check, where a caller needs it).
#ifndef SDG_BASE_STATUS_MACROS_H_
#define SDG_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SDG_RETURN_IF_ERROR(expr)                                 \
  do {                                                            \
    if (::absl::Status sdg_status_ = (expr); !sdg_status_.ok()) { \
      return sdg_status_;                                         \
    }                                                             \
  } while (false)

// `lhs` may be a declaration and `statusor` is a name: neither can be
// parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define SDG_STATUS_MACROS_CONCAT_INNER(a, b) a##b
#define SDG_STATUS_MACROS_CONCAT(a, b) SDG_STATUS_MACROS_CONCAT_INNER(a, b)

#define SDG_ASSIGN_OR_RETURN(lhs, expr)                                        \
  SDG_ASSIGN_OR_RETURN_IMPL(SDG_STATUS_MACROS_CONCAT(sdg_statusor_, __LINE__), \
                            lhs, expr)

#define SDG_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)     \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)
// NOLINTEND(bugprone-macro-parentheses)

#endif  // SDG_BASE_STATUS_MACROS_H_
