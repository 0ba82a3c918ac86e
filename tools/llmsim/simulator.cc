#include "tools/llmsim/simulator.h"

#include <atomic>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sdg::llmsim {
namespace {

using nlohmann::json;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

SimReply Error(int status, absl::string_view message) {
  return SimReply{status, ErrorBody(status, message), 0};
}

std::string NextId(absl::string_view prefix) {
  static std::atomic<int64_t> counter{0};
  return absl::StrCat(prefix, counter.fetch_add(1));
}

// The sampling fields both endpoints share.
struct Sampling {
  int n = 1;
  int64_t max_tokens = -1;
  std::optional<int64_t> seed;
};

// Returns an error reply, or nullopt with `out` filled in.
std::optional<SimReply> ParseSampling(const json& request, const Simulator& sim,
                                      Sampling& out) {
  auto model_field = request.find("model");
  if (sim.serves_any_model_name) {
    // llama.cpp answers with its one model whatever the request names.
  } else if (model_field == request.end() || !model_field->is_string()) {
    return Error(400, "\"model\" is required and must be a string");
  } else if (model_field->get<std::string>() != sim.model) {
    return Error(404,
                 absl::StrCat("The model `", model_field->get<std::string>(),
                              "` does not exist."));
  }
  if (auto n = request.find("n"); n != request.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 ||
        n->get<int64_t>() > 128) {
      return Error(400, "\"n\" must be an integer between 1 and 128");
    }
    out.n = n->get<int>();
  }
  if (sim.one_choice_per_request && out.n != 1) {
    return SimReply{
        500,
        LlamaCppErrorBody(500, "Only one completion choice is allowed",
                          "server_error"),
        0};
  }
  if (auto seed = request.find("seed");
      seed != request.end() && seed->is_number_integer()) {
    out.seed = seed->get<int64_t>();
  }
  if (auto max_tokens = request.find("max_tokens");
      max_tokens != request.end() && !max_tokens->is_null()) {
    if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
      return Error(400, "\"max_tokens\" must be a positive integer");
    }
    out.max_tokens = max_tokens->get<int64_t>();
  }
  return std::nullopt;
}

json Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

int64_t CountTokens(absl::string_view text) {
  int64_t count = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = absl::ascii_isspace(static_cast<unsigned char>(c));
    if (!space && !in_word) ++count;
    in_word = !space;
  }
  return count;
}

SimText MakeSimText(absl::string_view prompt, int sample_index,
                    int64_t max_tokens) {
  return MakeSimText(prompt, absl::StrCat(sample_index), max_tokens);
}

SimText MakeSimText(absl::string_view prompt, absl::string_view sample_label,
                    int64_t max_tokens) {
  return CutToTokens(absl::StrCat("sim(", sample_label, "): ", prompt),
                     max_tokens);
}

SimText CutToTokens(std::string full, int64_t max_tokens) {
  SimText out;
  out.tokens = CountTokens(full);
  out.finish_reason = "stop";
  if (max_tokens < 0 || out.tokens <= max_tokens) {
    out.text = std::move(full);
    return out;
  }
  // Keep everything up to the end of the max_tokens-th word.
  int64_t seen = 0;
  bool in_word = false;
  size_t end = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    bool space = absl::ascii_isspace(static_cast<unsigned char>(full[i]));
    if (!space && !in_word) ++seen;
    if (!space && seen == max_tokens) end = i + 1;
    in_word = !space;
  }
  out.text = full.substr(0, end);
  out.tokens = max_tokens;
  out.finish_reason = "length";
  return out;
}

std::string ErrorBody(int status, absl::string_view message) {
  std::string type = status == 404   ? "NotFoundError"
                     : status == 429 ? "RateLimitError"
                     : status >= 500 ? "ServerError"
                                     : "BadRequestError";
  return Dump({{"error",
                {{"message", message},
                 {"type", type},
                 {"param", nullptr},
                 {"code", status}}}});
}

std::string LlamaCppErrorBody(int status, absl::string_view message,
                              absl::string_view type) {
  return Dump(
      {{"error", {{"code", status}, {"message", message}, {"type", type}}}});
}

SimText Simulator::Generate(absl::Span<const absl::string_view> texts,
                            absl::string_view echo, int sample_index,
                            absl::string_view sample_label,
                            int64_t max_tokens) const {
  if (replies != nullptr) {
    if (std::optional<std::string> reply = replies->Find(texts, sample_index)) {
      return CutToTokens(*std::move(reply), max_tokens);
    }
  }
  return MakeSimText(echo, sample_label, max_tokens);
}

namespace {

// What a sample's echo names: its index, or (llama.cpp) its seed.
std::string SampleLabel(const Simulator& sim, const Sampling& sampling,
                        int sample_index) {
  if (!sim.samples_follow_seed) return absl::StrCat(sample_index);
  if (sampling.seed.has_value()) return absl::StrCat("seed ", *sampling.seed);
  static std::atomic<int64_t> unseeded{0};
  return absl::StrCat("unseeded ", unseeded.fetch_add(1));
}

}  // namespace

SimReply Simulator::Models() const {
  json body = {{"object", "list"},
               {"data", json::array({{{"id", model},
                                      {"object", "model"},
                                      {"created", 0},
                                      {"owned_by", owned_by},
                                      {"root", model},
                                      {"max_model_len", 4096}}})}};
  return SimReply{200, Dump(body), 0};
}

SimReply Simulator::Completions(absl::string_view request_body) const {
  json request = json::parse(request_body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    return Error(400, "request body is not a JSON object");
  }
  std::vector<std::string> prompts;
  auto prompt = request.find("prompt");
  if (prompt == request.end()) return Error(400, "\"prompt\" is required");
  if (prompt->is_string()) {
    prompts.push_back(prompt->get<std::string>());
  } else if (prompt->is_array() && prompt->size() > 1 &&
             !accepts_prompt_lists) {
    return Error(400, "this server takes one prompt per request, not a list");
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const json& item : *prompt) {
      if (!item.is_string()) {
        return Error(400, "\"prompt\" must be a string or a list of strings");
      }
      prompts.push_back(item.get<std::string>());
    }
  } else {
    return Error(400,
                 "\"prompt\" must be a string or a non-empty list of strings");
  }
  Sampling sampling;
  if (auto error = ParseSampling(request, *this, sampling)) return *error;

  json choices = json::array();
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    prompt_tokens += CountTokens(prompts[p]);
    for (int s = 0; s < sampling.n; ++s) {
      const absl::string_view prompt_text = prompts[p];
      SimText text =
          Generate({prompt_text}, prompt_text, s,
                   SampleLabel(*this, sampling, s), sampling.max_tokens);
      completion_tokens += text.tokens;
      choices.push_back({{"index", p * sampling.n + s},
                         {"text", text.text},
                         {"logprobs", nullptr},
                         {"finish_reason", text.finish_reason}});
    }
  }
  json body = {{"id", NextId("cmpl-")},
               {"object", "text_completion"},
               {"created", 0},
               {"model", model},
               {"choices", std::move(choices)},
               {"usage", Usage(prompt_tokens, completion_tokens)}};
  return SimReply{200, Dump(body), static_cast<int64_t>(prompts.size()),
                  completion_tokens, prompt_tokens};
}

SimReply Simulator::Props(int total_slots) const {
  json body = {{"total_slots", total_slots},
               {"model_path", model},
               {"default_generation_settings", {{"n_ctx", 4096}}}};
  return SimReply{200, Dump(body), 0};
}

namespace {

// FNV-1a of the text and the dimension: the same in every process (a
// client compares vectors across runs), unlike absl::Hash.
uint64_t StableHash(absl::string_view text, int64_t dimension) {
  uint64_t hash = 14695981039346656037ull;
  auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 1099511628211ull;
  };
  for (char c : text) mix(static_cast<unsigned char>(c));
  for (int shift = 0; shift < 64; shift += 8) {
    mix(static_cast<unsigned char>(static_cast<uint64_t>(dimension) >> shift));
  }
  return hash;
}

}  // namespace

SimReply Simulator::Embeddings(absl::string_view request_body) const {
  json request = json::parse(request_body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    return Error(400, "request body is not a JSON object");
  }
  Sampling sampling;
  if (auto error = ParseSampling(request, *this, sampling)) return *error;
  std::vector<std::string> inputs;
  auto input = request.find("input");
  if (input != request.end() && input->is_string()) {
    inputs.push_back(input->get<std::string>());
  } else if (input != request.end() && input->is_array() && !input->empty()) {
    for (const json& text : *input) {
      if (!text.is_string()) {
        return Error(400, "\"input\" must be a string or a list of strings");
      }
      inputs.push_back(text.get<std::string>());
    }
  } else {
    return Error(400, "\"input\" must be a string or a list of strings");
  }
  int64_t dimensions = 8;
  if (auto asked = request.find("dimensions");
      asked != request.end() && !asked->is_null()) {
    if (!asked->is_number_integer() || asked->get<int64_t>() < 1 ||
        asked->get<int64_t>() > 4096) {
      return Error(400, "\"dimensions\" must be an integer from 1 to 4096");
    }
    dimensions = asked->get<int64_t>();
  }
  json data = json::array();
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    prompt_tokens += CountTokens(inputs[i]);
    json vector = json::array();
    for (int64_t d = 0; d < dimensions; ++d) {
      const uint64_t hash = StableHash(inputs[i], d);
      vector.push_back(static_cast<double>(hash % 2001) / 1000.0 - 1.0);
    }
    data.push_back({{"index", i},
                    {"object", "embedding"},
                    {"embedding", std::move(vector)}});
  }
  json body = {{"id", NextId("embd-")},
               {"object", "list"},
               {"created", 0},
               {"model", model},
               {"data", std::move(data)},
               {"usage",
                {{"prompt_tokens", prompt_tokens},
                 {"total_tokens", prompt_tokens},
                 {"completion_tokens", 0}}}};
  return SimReply{200, Dump(body), static_cast<int64_t>(inputs.size()), 0,
                  prompt_tokens};
}

SimReply Simulator::ChatCompletions(absl::string_view request_body) const {
  json request = json::parse(request_body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    return Error(400, "request body is not a JSON object");
  }
  auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array() || messages->empty()) {
    return Error(400, "\"messages\" must be a non-empty list");
  }
  std::string last_user;
  std::vector<std::string> contents;
  bool found = false;
  int64_t prompt_tokens = 0;
  for (const json& message : *messages) {
    if (!message.is_object() || !message.contains("role") ||
        !message["role"].is_string() || !message.contains("content") ||
        !message["content"].is_string()) {
      return Error(400, "each message needs a string \"role\" and \"content\"");
    }
    prompt_tokens += CountTokens(message["content"].get<std::string>());
    contents.push_back(message["content"].get<std::string>());
    if (message["role"] == "user") {
      last_user = message["content"].get<std::string>();
      found = true;
    }
  }
  if (!found) return Error(400, "\"messages\" has no user message");
  Sampling sampling;
  if (auto error = ParseSampling(request, *this, sampling)) return *error;

  json choices = json::array();
  int64_t completion_tokens = 0;
  for (int s = 0; s < sampling.n; ++s) {
    std::vector<absl::string_view> texts(contents.begin(), contents.end());
    SimText text =
        Generate(texts, last_user, s, SampleLabel(*this, sampling, s),
                 sampling.max_tokens);
    completion_tokens += text.tokens;
    choices.push_back(
        {{"index", s},
         {"message", {{"role", "assistant"}, {"content", text.text}}},
         {"logprobs", nullptr},
         {"finish_reason", text.finish_reason}});
  }
  json body = {{"id", NextId("chatcmpl-")},
               {"object", "chat.completion"},
               {"created", 0},
               {"model", model},
               {"choices", std::move(choices)},
               {"usage", Usage(prompt_tokens, completion_tokens)}};
  return SimReply{200, Dump(body), 1, completion_tokens, prompt_tokens};
}

namespace {

// The messages' contents, or an error reply.
std::optional<SimReply> MessageContents(const json& request,
                                        std::vector<std::string>& out) {
  auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array() || messages->empty()) {
    return Error(400, "\"messages\" must be a non-empty list");
  }
  for (const json& message : *messages) {
    if (!message.is_object() || !message.contains("content") ||
        !message["content"].is_string()) {
      return Error(400, "each message needs a string \"content\"");
    }
    out.push_back(message["content"].get<std::string>());
  }
  return std::nullopt;
}

json TokenIds(int64_t count) {
  json ids = json::array();
  for (int64_t i = 0; i < count; ++i) ids.push_back(i);
  return ids;
}

}  // namespace

SimReply Simulator::Tokenize(absl::string_view request_body) const {
  json request = json::parse(request_body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    return Error(400, "request body is not a JSON object");
  }
  if (owned_by == "llamacpp") {
    auto content = request.find("content");
    if (content == request.end() || !content->is_string()) {
      return SimReply{400,
                      LlamaCppErrorBody(400, "\"content\" must be a string",
                                        "invalid_request_error"),
                      0};
    }
    json body = {
        {"tokens", TokenIds(CountTokens(content->get<std::string>()))}};
    return SimReply{200, Dump(body), 0};
  }
  auto model_field = request.find("model");
  if (model_field != request.end() && model_field->is_string() &&
      model_field->get<std::string>() != model) {
    return Error(404,
                 absl::StrCat("The model `", model_field->get<std::string>(),
                              "` does not exist."));
  }
  int64_t count = 0;
  if (auto prompt = request.find("prompt"); prompt != request.end()) {
    if (!prompt->is_string()) {
      return Error(400, "\"prompt\" must be a string");
    }
    count = CountTokens(prompt->get<std::string>());
  } else {
    std::vector<std::string> contents;
    if (auto error = MessageContents(request, contents)) return *error;
    for (const std::string& content : contents) count += CountTokens(content);
  }
  json body = {{"count", count},
               {"max_model_len", 4096},
               {"tokens", TokenIds(count)},
               {"token_strs", nullptr}};
  return SimReply{200, Dump(body), 0};
}

SimReply Simulator::ApplyTemplate(absl::string_view request_body) const {
  json request = json::parse(request_body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    return Error(400, "request body is not a JSON object");
  }
  std::vector<std::string> contents;
  if (auto error = MessageContents(request, contents)) return *error;
  json body = {{"prompt", absl::StrJoin(contents, "\n")}};
  return SimReply{200, Dump(body), 0};
}

}  // namespace sdg::llmsim
