#include "server/backend/sample_fanout.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace sdg {
namespace {

using nlohmann::json;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

int64_t UsageField(const json& reply, const char* field) {
  auto usage = reply.find("usage");
  if (usage == reply.end() || !usage->is_object()) return 0;
  auto value = usage->find(field);
  return value != usage->end() && value->is_number_integer()
             ? value->get<int64_t>()
             : 0;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitSamples(absl::string_view body,
                                                      int samples) {
  json request = json::parse(body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    return absl::InvalidArgumentError(
        "a request to send one sample at a time is not a JSON object");
  }
  auto seed = request.find("seed");
  const bool seeded = seed != request.end() && seed->is_number_integer();
  const int64_t first_seed = seeded ? seed->get<int64_t>() : 0;
  std::vector<std::string> bodies;
  bodies.reserve(samples);
  request["n"] = 1;
  for (int s = 0; s < samples; ++s) {
    if (seeded) request["seed"] = first_seed + s;
    bodies.push_back(Dump(request));
  }
  return bodies;
}

BackendReply MergeSamples(std::vector<BackendReply> replies) {
  const int samples = static_cast<int>(replies.size());
  BackendReply merged;
  for (const BackendReply& reply : replies) {
    merged.attempts = std::max(merged.attempts, reply.attempts);
  }
  for (int s = 0; s < samples; ++s) {
    if (!replies[s].status.ok()) {
      merged.status =
          absl::Status(replies[s].status.code(),
                       absl::StrCat("sample ", s + 1, " of ", samples, ": ",
                                    replies[s].status.message()));
      return merged;
    }
  }
  json choices = json::array();
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  for (int s = 0; s < samples; ++s) {
    json reply = json::parse(replies[s].body, nullptr, false);
    if (reply.is_discarded() || !reply.is_object() ||
        !reply.contains("choices") || !reply["choices"].is_array()) {
      merged.status = absl::DataLossError(
          absl::StrCat("sample ", s + 1, " of ", samples,
                       ": backend reply was not valid JSON with choices"));
      return merged;
    }
    for (json& choice : reply["choices"]) {
      if (!choice.is_object() || !choice.contains("index") ||
          !choice["index"].is_number_integer()) {
        merged.status = absl::DataLossError(
            absl::StrCat("sample ", s + 1, " of ", samples,
                         ": a choice has no integer index"));
        return merged;
      }
      choice["index"] = choice["index"].get<int64_t>() * samples + s;
      choices.push_back(std::move(choice));
    }
    prompt_tokens += UsageField(reply, "prompt_tokens");
    completion_tokens += UsageField(reply, "completion_tokens");
  }
  std::sort(choices.begin(), choices.end(), [](const json& a, const json& b) {
    return a["index"] < b["index"];
  });
  merged.body = Dump({{"choices", std::move(choices)},
                      {"usage",
                       {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}}}});
  return merged;
}

}  // namespace sdg
