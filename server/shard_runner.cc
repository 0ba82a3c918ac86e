#include "server/shard_runner.h"

#include <string>

#include "absl/synchronization/mutex.h"
#include "server/openai_protocol.h"

namespace sdg {
namespace {

// The replies of one shard's requests, filled in on the HTTP loop thread.
struct ReplyCollector {
  explicit ReplyCollector(size_t count) : replies(count), remaining(count) {}

  void Deliver(size_t index, BackendReply reply) {
    absl::MutexLock lock(&mu);
    replies[index] = std::move(reply);
    --remaining;
  }
  void AwaitAll() {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](size_t* left) { return *left == 0; }, &remaining));
  }

  absl::Mutex mu;
  std::vector<BackendReply> replies ABSL_GUARDED_BY(mu);
  size_t remaining ABSL_GUARDED_BY(mu);
};

}  // namespace

ShardOutcome BackendShardRunner::Run(const JobSpec& spec,
                                     const ShardSpec& shard,
                                     CancellationToken& token) {
  ShardOutcome outcome;
  if (token.IsCancelled()) {
    outcome.status = token.reason();
    return outcome;
  }
  const v1::Block& block = spec.block;
  const int n = SamplesPerRow(block);

  std::vector<std::string> prompts;
  prompts.reserve(shard.row_count);
  for (int64_t r = 0; r < shard.row_count; ++r) {
    absl::StatusOr<std::string> prompt =
        spec.prompt_template.Render(spec.rows[shard.first_row + r]);
    if (!prompt.ok()) {
      outcome.status = prompt.status();
      return outcome;
    }
    prompts.push_back(*std::move(prompt));
  }

  const bool chat = block.api() == v1::API_CHAT;
  bool batched = false;
  if (!chat && prompts.size() > 1) {
    std::optional<bool> batching = spec.backend->AwaitBatching(token);
    if (!batching.has_value()) {
      outcome.status = token.reason();
      return outcome;
    }
    batched = *batching;
  }
  std::vector<std::string> bodies;
  if (batched) {
    bodies.push_back(BuildCompletionsBody(block, prompts));
  } else {
    for (const std::string& prompt : prompts) {
      bodies.push_back(chat ? BuildChatBody(block, prompt)
                            : BuildCompletionsBody(block, {prompt}));
    }
  }

  ReplyCollector collector(bodies.size());
  std::vector<Backend::CallId> calls;
  calls.reserve(bodies.size());
  absl::string_view path = chat ? kChatCompletionsPath : kCompletionsPath;
  for (size_t i = 0; i < bodies.size(); ++i) {
    calls.push_back(spec.backend->Post(path, std::move(bodies[i]),
                                       [&collector, i](BackendReply reply) {
                                         collector.Deliver(i, std::move(reply));
                                       }));
  }
  {
    CancellationToken::Registration on_cancel = token.OnCancel([&] {
      for (Backend::CallId call : calls) spec.backend->Cancel(call);
    });
    collector.AwaitAll();
  }

  // Every callback has run; the collector is ours alone now.
  absl::MutexLock lock(&collector.mu);
  std::vector<Completion> completions;
  completions.reserve(collector.replies.size());
  for (BackendReply& reply : collector.replies) {
    absl::StatusOr<Completion> completion =
        !reply.status.ok() ? absl::StatusOr<Completion>(reply.status)
        : chat             ? ParseChatReply(reply.body, n)
                           : ParseCompletionsReply(
                                 reply.body,
                     batched ? n * static_cast<int>(prompts.size()) : n);
    if (!completion.ok()) {
      // A cancelled job reports its own reason, not the aborted request's.
      outcome.status =
          token.IsCancelled() ? token.reason() : completion.status();
      outcome.attempts = reply.attempts;
      return outcome;
    }
    outcome.prompt_tokens += completion->prompt_tokens;
    outcome.completion_tokens += completion->completion_tokens;
    completions.push_back(*std::move(completion));
  }
  metrics_.BackendTokens(spec.backend->name(), outcome.prompt_tokens,
                         outcome.completion_tokens);

  outcome.rows.reserve(shard.row_count * n);
  for (int64_t r = 0; r < shard.row_count; ++r) {
    for (int s = 0; s < n; ++s) {
      const Choice& choice = batched ? completions[0].choices[r * n + s]
                                     : completions[r].choices[s];
      v1::ResultRow& row = outcome.rows.emplace_back();
      row.set_row_index(shard.first_row + r);
      row.set_sample_index(s);
      *row.mutable_columns() = spec.rows[shard.first_row + r];
      (*row.mutable_columns()->mutable_fields())[block.output_column()]
          .set_string_value(choice.text);
      row.set_finish_reason(choice.finish_reason);
    }
  }
  return outcome;
}

}  // namespace sdg
