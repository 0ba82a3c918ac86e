#include "base/repeated_flag.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sdg {

std::vector<std::string> TakeRepeatedFlag(absl::string_view name,
                                          std::vector<char*>& args) {
  std::vector<std::string> values;
  const std::string long_form = absl::StrCat("--", name);
  const std::string short_form = absl::StrCat("-", name);
  std::vector<char*> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i] == nullptr ? "" : args[i];
    if (arg == "--") {  // everything after is positional
      kept.insert(kept.end(), args.begin() + i, args.end());
      break;
    }
    bool matched = false;
    for (const std::string& form : {long_form, short_form}) {
      if (absl::StartsWith(arg, form + "=")) {
        values.emplace_back(arg.substr(form.size() + 1));
        matched = true;
      } else if (arg == form && i + 1 < args.size()) {
        values.emplace_back(args[++i]);
        matched = true;
      }
      if (matched) break;
    }
    if (!matched) kept.push_back(args[i]);
  }
  args = std::move(kept);
  return values;
}

}  // namespace sdg
