// One JSON object per line on stderr: {"ts":...,"level":...,"msg":...,fields}.
// Debian 12's Abseil has no absl/log, so this is the project's only logger.
#ifndef SDG_BASE_LOGGING_H_
#define SDG_BASE_LOGGING_H_

#include <nlohmann/json.hpp>
#include <string_view>

namespace sdg {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Parses "debug", "info", "warning" or "error".
bool ParseLogLevel(std::string_view text, LogLevel* level);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// Writes one line if `level` is enabled. `fields` must be a JSON object, e.g.
// Log(LogLevel::kInfo, "job started", {{"job_id", id}, {"rows", 100}}).
void Log(LogLevel level, std::string_view msg,
         const nlohmann::json& fields = nlohmann::json::object());

}  // namespace sdg

#endif  // SDG_BASE_LOGGING_H_
