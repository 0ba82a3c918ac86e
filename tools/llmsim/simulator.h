// llmsim's replies: what an OpenAI-compatible server (vLLM's dialect) answers
// to /v1/models, /v1/completions and /v1/chat/completions, computed without
// any I/O. The text for prompt P and sample s is "sim(s): P", or the reply
// the reply book has for it (--replies), cut to max_tokens tokens (a token
// is a whitespace-separated word).
#ifndef SDG_TESTS_LLMSIM_SIMULATOR_H_
#define SDG_TESTS_LLMSIM_SIMULATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tools/llmsim/reply_book.h"

namespace sdg::llmsim {

struct SimReply {
  int status = 200;
  std::string body;
  int64_t prompts = 0;            // prompts answered, for /stats
  int64_t completion_tokens = 0;  // for --ms_per_token, and /stats
  int64_t prompt_tokens = 0;      // for /stats
};

// The deterministic text and its finish_reason ("length" when cut).
struct SimText {
  std::string text;
  std::string finish_reason;
  int64_t tokens = 0;
};

struct Simulator {
  std::string model;
  // vLLM: "vllm" and prompt lists; llama.cpp: "llamacpp" and one prompt.
  std::string owned_by = "vllm";
  bool accepts_prompt_lists = true;
  // Canned replies; none: every reply echoes its prompt.
  std::shared_ptr<const ReplyBook> replies = nullptr;
  // llama.cpp's quirks (its server's OpenAI layer):
  // any "n" other than 1 is HTTP 500 "Only one completion choice is allowed";
  bool one_choice_per_request = false;
  // the request's "model" is not checked (it serves its one model);
  bool serves_any_model_name = false;
  // a sample is its seed's: the echo reads "sim(seed S): P", and a request
  // without a seed draws one ("sim(unseeded K): P", K counting requests).
  bool samples_follow_seed = false;

  SimReply Models() const;
  // llama.cpp's GET /props.
  SimReply Props(int total_slots) const;
  SimReply Completions(absl::string_view request_body) const;
  SimReply ChatCompletions(absl::string_view request_body) const;
  // POST /v1/embeddings: {"model", "input": a text or a list of them,
  // "dimensions"} to one vector per input, the same for the same text (its
  // hash spread over -1..1), 8 numbers unless `dimensions` says.
  SimReply Embeddings(absl::string_view request_body) const;
  // POST /tokenize at the server's root, counting as the two endpoints
  // above count usage. vLLM's: {"model", "prompt"} or {"model",
  // "messages"} to {"count", "max_model_len", "tokens", "token_strs"};
  // llama.cpp's (owned_by "llamacpp"): {"content"} to {"tokens"}.
  SimReply Tokenize(absl::string_view request_body) const;
  // llama.cpp's POST /apply-template: {"messages"} to {"prompt"}, the text
  // the model would see. llmsim's chat template is the contents joined by
  // newlines, so it adds no token to what /chat/completions counts.
  SimReply ApplyTemplate(absl::string_view request_body) const;
  // The reply book's text for these request texts, else the echo of `echo`.
  SimText Generate(absl::Span<const absl::string_view> texts,
                   absl::string_view echo, int sample_index,
                   absl::string_view sample_label, int64_t max_tokens) const;
};

SimText MakeSimText(absl::string_view prompt, int sample_index,
                    int64_t max_tokens);  // max_tokens < 0: no limit
// "sim(LABEL): prompt", cut the same way.
SimText MakeSimText(absl::string_view prompt, absl::string_view sample_label,
                    int64_t max_tokens);
// `text` cut after its max_tokens-th token.
SimText CutToTokens(std::string text, int64_t max_tokens);

int64_t CountTokens(absl::string_view text);

// An OpenAI-style error body: {"error":{"message":...,"type":...,"code":...}}.
std::string ErrorBody(int status, absl::string_view message);
// llama.cpp's error body: {"error":{"code":...,"message":...,"type":...}}.
std::string LlamaCppErrorBody(int status, absl::string_view message,
                              absl::string_view type);

}  // namespace sdg::llmsim

#endif  // SDG_TESTS_LLMSIM_SIMULATOR_H_
