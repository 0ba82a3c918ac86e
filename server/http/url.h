// URLs as sdgd shows them: a password in the userinfo (http://user:secret@
// host/) is replaced, so a URL can go into a log, an error or an event.
#ifndef SDG_SERVER_HTTP_URL_H_
#define SDG_SERVER_HTTP_URL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sdg {

// "http://user:secret@host/v1" -> "http://user:[redacted]@host/v1"; any
// other URL unchanged.
std::string RedactUrlPassword(absl::string_view url);

}  // namespace sdg

#endif  // SDG_SERVER_HTTP_URL_H_
