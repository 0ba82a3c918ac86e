// The process's environment, read through one function that the flag
// readers take as a parameter (tests pass their own).
#ifndef SDG_BASE_ENVIRONMENT_H_
#define SDG_BASE_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>

namespace sdg {

using GetEnv =
    std::function<std::optional<std::string>(const std::string& name)>;

// The variable's value, or nullopt when it is not set.
std::optional<std::string> EnvironmentVariable(const std::string& name);

}  // namespace sdg

#endif  // SDG_BASE_ENVIRONMENT_H_
