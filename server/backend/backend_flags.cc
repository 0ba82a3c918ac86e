#include "server/backend/backend_flags.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/read_file.h"
#include "server/http/url.h"

namespace sdg {
namespace {

bool IsValidName(absl::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '-';
  });
}

absl::Status FlagError(absl::string_view flag, absl::string_view value,
                       absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " \"", value, "\": ", reason));
}

// Calls `apply(backend, value)` for each flag value, in order: on the named
// backend for NAME=VALUE, on all of them for a bare VALUE.
absl::Status ForEachValue(
    absl::string_view flag, const std::vector<std::string>& values,
    bool name_required, std::vector<BackendOptions>& backends,
    const std::function<absl::Status(BackendOptions&, absl::string_view)>&
        apply) {
  for (const std::string& value : values) {
    size_t equals = value.find('=');
    if (equals == std::string::npos) {
      if (name_required) {
        return FlagError(flag, value, "expected NAME=VALUE");
      }
      for (BackendOptions& backend : backends) {
        if (absl::Status s = apply(backend, value); !s.ok()) {
          return FlagError(flag, value, s.message());
        }
      }
      continue;
    }
    absl::string_view name = absl::string_view(value).substr(0, equals);
    absl::string_view setting = absl::string_view(value).substr(equals + 1);
    auto backend =
        std::find_if(backends.begin(), backends.end(),
                     [&](const BackendOptions& b) { return b.name == name; });
    if (backend == backends.end()) {
      std::vector<std::string> names;
      names.reserve(backends.size());
      for (const BackendOptions& b : backends) names.push_back(b.name);
      return FlagError(
          flag, value,
          absl::StrCat("no --backend is named \"", name,
                       "\" (configured: ", absl::StrJoin(names, ", "), ")"));
    }
    if (absl::Status s = apply(*backend, setting); !s.ok()) {
      return FlagError(flag, value, s.message());
    }
  }
  return absl::OkStatus();
}

absl::Status SetBatching(BackendOptions& backend, absl::string_view value) {
  if (value == "auto") {
    backend.batching = BatchingMode::kAuto;
  } else if (value == "on") {
    backend.batching = BatchingMode::kOn;
  } else if (value == "off") {
    backend.batching = BatchingMode::kOff;
  } else {
    return absl::InvalidArgumentError("must be auto, on or off");
  }
  return absl::OkStatus();
}

absl::Status SetMaxInFlight(BackendOptions& backend, absl::string_view value) {
  int limit = 0;
  if (value == "auto") {
    backend.in_flight_mode = InFlightMode::kAuto;
  } else if (value == "adaptive") {
    backend.in_flight_mode = InFlightMode::kAdaptive;
  } else if (absl::SimpleAtoi(value, &limit) && limit >= 1 && limit <= 65536) {
    backend.in_flight_mode = InFlightMode::kFixed;
    backend.max_in_flight = limit;
  } else {
    return absl::InvalidArgumentError(
        "must be a number from 1 to 65536, auto or adaptive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) {
    return absl::InvalidArgumentError(contents.status().message());
  }
  std::string key(absl::StripAsciiWhitespace(*contents));
  if (key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  }
  return key;
}

}  // namespace

absl::StatusOr<BackendOptions> ParseBackendFlag(absl::string_view flag) {
  std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(flag, absl::MaxSplits('=', 1));
  if (!IsValidName(parts.first) || parts.second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend \"", RedactUrlPassword(flag),
        "\": expected NAME=URL[,URL...] with NAME made of letters, digits, "
        "'_' and '-', e.g. vllm=http://127.0.0.1:8000/v1"));
  }
  BackendOptions options;
  options.name = std::string(parts.first);
  for (absl::string_view url : absl::StrSplit(parts.second, ',')) {
    while (absl::EndsWith(url, "/")) url.remove_suffix(1);
    if (!absl::StartsWith(url, "http://") &&
        !absl::StartsWith(url, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--backend ", options.name, ": \"", RedactUrlPassword(url),
          "\" is not an http:// or https:// URL"));
    }
    options.base_urls.emplace_back(url);
  }
  return options;
}

std::string ApiKeyEnvVar(absl::string_view backend_name) {
  std::string name = absl::AsciiStrToUpper(backend_name);
  std::replace(name.begin(), name.end(), '-', '_');
  return absl::StrCat("SDG_BACKEND_API_KEY_", name);
}

absl::StatusOr<std::vector<BackendOptions>> BackendsFromFlags(
    const BackendFlags& flags, const GetEnv& getenv) {
  std::vector<BackendOptions> backends;
  for (const std::string& flag : flags.backend) {
    absl::StatusOr<BackendOptions> parsed = ParseBackendFlag(flag);
    if (!parsed.ok()) return parsed.status();
    BackendOptions backend = flags.defaults;
    backend.name = parsed->name;
    backend.base_urls = parsed->base_urls;
    backends.push_back(std::move(backend));
  }
  if (absl::Status s = ForEachValue("backend_batching", flags.batching, false,
                                    backends, SetBatching);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ForEachValue("backend_max_in_flight", flags.max_in_flight, false,
                       backends, SetMaxInFlight);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ForEachValue(
          "backend_rate_limit", flags.rate_limit, false, backends,
          [](BackendOptions& backend, absl::string_view value) -> absl::Status {
            absl::StatusOr<RateLimits> limits = ParseRateLimits(value);
            if (!limits.ok()) return limits.status();
            backend.rate_limits = *limits;
            return absl::OkStatus();
          });
      !s.ok()) {
    return s;
  }
  for (BackendOptions& backend : backends) {
    if (std::optional<std::string> key = getenv(ApiKeyEnvVar(backend.name));
        key.has_value() && !key->empty()) {
      backend.api_key = ApiKey(*key);
    }
  }
  if (absl::Status s = ForEachValue(
          "backend_api_key_file", flags.api_key_file, true, backends,
          [](BackendOptions& backend, absl::string_view path) -> absl::Status {
            absl::StatusOr<std::string> key = ReadKeyFile(std::string(path));
            if (!key.ok()) return key.status();
            backend.api_key = ApiKey(*std::move(key));
            return absl::OkStatus();
          });
      !s.ok()) {
    return s;
  }
  return backends;
}

}  // namespace sdg
