#include "server/scheduling/shard_runner.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/openai_protocol.h"

namespace sdg {
namespace {

// The replies of one shard's requests, filled in on the HTTP loop thread.
class ReplyCollector {
 public:
  explicit ReplyCollector(size_t count) : replies_(count), remaining_(count) {}

  void Deliver(size_t index, BackendReply reply) {
    absl::MutexLock lock(&mu_);
    replies_[index] = std::move(reply);
    --remaining_;
  }
  // Blocks until every reply has been delivered, then hands them over.
  std::vector<BackendReply> AwaitAll() {
    absl::MutexLock lock(&mu_);
    auto all_delivered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return remaining_ == 0;
    };
    mu_.Await(absl::Condition(&all_delivered));
    return std::move(replies_);
  }

 private:
  absl::Mutex mu_;
  std::vector<BackendReply> replies_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_);
};

ShardOutcome Failed(absl::Status status, int attempts = 0) {
  ShardOutcome outcome;
  outcome.status = std::move(status);
  outcome.attempts = attempts;
  return outcome;
}

}  // namespace

ShardOutcome BackendShardRunner::Run(const JobSpec& spec,
                                     const ShardSpec& shard,
                                     std::vector<google::protobuf::Struct> rows,
                                     CancellationToken& token) {
  if (token.IsCancelled()) return Failed(token.reason());
  auto backend = backends_.find(spec.block.backend());
  if (backend == backends_.end()) {
    // Validation admits only configured backends; this is a wiring bug.
    return Failed(absl::InternalError(absl::StrCat(
        "backend \"", spec.block.backend(), "\" is not configured")));
  }
  absl::StatusOr<std::vector<std::string>> prompts = RenderPrompts(spec, rows);
  if (!prompts.ok()) return Failed(prompts.status());
  absl::StatusOr<Requests> requests =
      BuildRequests(spec, *std::move(prompts), *backend->second, token);
  if (!requests.ok()) return Failed(requests.status());
  std::vector<BackendReply> replies = SendAndWait(
      *backend->second, requests->path, std::move(requests->bodies), token);
  return BuildOutcome(spec, shard, std::move(rows), *requests,
                      std::move(replies), token);
}

absl::StatusOr<std::vector<std::string>> BackendShardRunner::RenderPrompts(
    const JobSpec& spec,
    const std::vector<google::protobuf::Struct>& rows) const {
  std::vector<std::string> prompts;
  prompts.reserve(rows.size());
  for (const google::protobuf::Struct& row : rows) {
    absl::StatusOr<std::string> prompt = spec.prompt_template.Render(row);
    if (!prompt.ok()) return prompt.status();
    prompts.push_back(*std::move(prompt));
  }
  return prompts;
}

absl::StatusOr<BackendShardRunner::Requests> BackendShardRunner::BuildRequests(
    const JobSpec& spec, std::vector<std::string> prompts, Backend& backend,
    CancellationToken& token) const {
  const v1::Block& block = spec.block;
  const bool chat = block.api() == v1::API_CHAT;
  Requests requests;
  requests.path = chat ? kChatCompletionsPath : kCompletionsPath;
  if (!chat && prompts.size() > 1) {
    std::optional<bool> batching = backend.WaitForBatchingDecision(token);
    if (!batching.has_value()) return token.reason();
    requests.batched = *batching;
  }
  if (requests.batched) {
    requests.bodies.push_back(BuildCompletionsBody(block, prompts));
    return requests;
  }
  requests.bodies.reserve(prompts.size());
  for (const std::string& prompt : prompts) {
    requests.bodies.push_back(chat ? BuildChatBody(block, prompt)
                                   : BuildCompletionsBody(block, {prompt}));
  }
  return requests;
}

std::vector<BackendReply> BackendShardRunner::SendAndWait(
    Backend& backend, absl::string_view path, std::vector<std::string> bodies,
    CancellationToken& token) const {
  ReplyCollector collector(bodies.size());
  std::vector<Backend::CallId> calls;
  calls.reserve(bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i) {
    calls.push_back(backend.Post(path, std::move(bodies[i]),
                                 [&collector, i](BackendReply reply) {
                                   collector.Deliver(i, std::move(reply));
                                 }));
  }
  CancellationToken::Registration on_cancel = token.OnCancel([&] {
    for (Backend::CallId call : calls) backend.Cancel(call);
  });
  return collector.AwaitAll();
}

ShardOutcome BackendShardRunner::BuildOutcome(
    const JobSpec& spec, const ShardSpec& shard,
    std::vector<google::protobuf::Struct> rows, const Requests& requests,
    std::vector<BackendReply> replies, CancellationToken& token) const {
  const v1::Block& block = spec.block;
  const bool chat = block.api() == v1::API_CHAT;
  const int n = block.n();
  const int choices_per_reply =
      requests.batched ? n * static_cast<int>(shard.row_count) : n;
  ShardOutcome outcome;
  std::vector<Completion> completions;
  completions.reserve(replies.size());
  for (BackendReply& reply : replies) {
    absl::StatusOr<Completion> completion =
        !reply.status.ok() ? absl::StatusOr<Completion>(reply.status)
        : chat             ? ParseChatReply(reply.body, n)
               : ParseCompletionsReply(reply.body, choices_per_reply);
    if (!completion.ok()) {
      // A stopped job reports its own reason, not the aborted request's.
      return Failed(token.IsCancelled() ? token.reason() : completion.status(),
                    reply.attempts);
    }
    outcome.prompt_tokens += completion->prompt_tokens;
    outcome.completion_tokens += completion->completion_tokens;
    completions.push_back(*std::move(completion));
  }
  metrics_.BackendTokens(block.backend(), outcome.prompt_tokens,
                         outcome.completion_tokens);

  outcome.rows.reserve(shard.row_count * n);
  for (int64_t r = 0; r < shard.row_count; ++r) {
    for (int s = 0; s < n; ++s) {
      const Choice& choice = requests.batched
                                 ? completions[0].choices[r * n + s]
                                 : completions[r].choices[s];
      v1::ResultRow& row = outcome.rows.emplace_back();
      row.set_row_index(shard.first_row + r);
      row.set_sample_index(s);
      // The last sample takes the row; the others copy it.
      if (s + 1 == n) {
        *row.mutable_columns() = std::move(rows[r]);
      } else {
        *row.mutable_columns() = rows[r];
      }
      (*row.mutable_columns()->mutable_fields())[block.output_column()]
          .set_string_value(choice.text);
      row.set_finish_reason(choice.finish_reason);
    }
  }
  return outcome;
}

}  // namespace sdg
