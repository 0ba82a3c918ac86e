#include "base/logging.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sdg {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  for (LogLevel candidate : {LogLevel::kDebug, LogLevel::kInfo,
                             LogLevel::kWarning, LogLevel::kError}) {
    if (text == LevelName(candidate)) {
      *level = candidate;
      return true;
    }
  }
  return false;
}

void SetLogLevel(LogLevel level) { g_min_level = static_cast<int>(level); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_min_level.load();
}

void Log(LogLevel level, std::string_view msg, const nlohmann::json& fields) {
  if (!LogEnabled(level)) return;
  nlohmann::ordered_json line;
  line["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                absl::UTCTimeZone());
  line["level"] = LevelName(level);
  line["msg"] = msg;
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) line[key] = value;
  }
  // One write() per line keeps lines whole when threads log at once.
  std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  [[maybe_unused]] ssize_t ignored =
      ::write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace sdg
