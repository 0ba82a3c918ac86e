#include "server/scheduling/shard_runner.h"

#include <algorithm>
#include <string>
#include <utility>

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
  Prompts prompts = RenderPrompts(spec, shard, rows);
  Requests requests;
  std::vector<BackendReply> replies;
  if (!prompts.texts.empty()) {
    absl::StatusOr<Requests> built =
        BuildRequests(spec, std::move(prompts.texts), *backend->second, token);
    if (!built.ok()) return Failed(built.status());
    requests = *std::move(built);
    replies = SendAndWait(*backend->second, requests.path,
                          std::exchange(requests.bodies, {}), token);
  }
  return BuildOutcome(spec, shard, std::move(rows), std::move(prompts),
                      requests, std::move(replies), token);
}

BackendShardRunner::Prompts BackendShardRunner::RenderPrompts(
    const JobSpec& spec, const ShardSpec& shard,
    const std::vector<google::protobuf::Struct>& rows) const {
  Prompts prompts;
  prompts.texts.reserve(rows.size());
  size_t shard_bytes = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t row_index = shard.first_row + static_cast<int64_t>(r);
    absl::StatusOr<std::string> prompt =
        spec.prompt_template.Render(rows[r], spec.max_prompt_bytes);
    if (prompt.ok() &&
        shard_bytes + prompt->size() > spec.max_shard_prompt_bytes) {
      prompt = absl::InvalidArgumentError(absl::StrCat(
          "the shard's prompts are longer than ", spec.max_shard_prompt_bytes,
          " bytes (the server's --max_shard_prompt_bytes); use a smaller "
          "batch_size"));
    }
    if (!prompt.ok()) {
      prompts.failed.push_back(RowFailure{row_index, prompt.status(), 0});
      continue;
    }
    shard_bytes += prompt->size();
    prompts.texts.push_back(*std::move(prompt));
    prompts.rows.push_back(static_cast<int64_t>(r));
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
    std::vector<google::protobuf::Struct> rows, Prompts prompts,
    const Requests& requests, std::vector<BackendReply> replies,
    CancellationToken& token) const {
  // A stopped job reports its own reason, not its aborted requests'.
  if (token.IsCancelled()) return Failed(token.reason());
  const v1::Block& block = spec.block;
  const bool chat = block.api() == v1::API_CHAT;
  const bool output_only =
      spec.result_columns == v1::RESULT_COLUMNS_OUTPUT_ONLY;
  const int n = block.n();
  const int prompted = static_cast<int>(prompts.rows.size());
  ShardOutcome outcome;
  // Each prompted row's choices, or its failure, by its place in prompts.
  std::vector<const Choice*> first_choice(prompted, nullptr);
  std::vector<Completion> completions(replies.size());
  for (size_t q = 0; q < replies.size(); ++q) {
    BackendReply& reply = replies[q];
    // The prompted rows this request carried.
    const int first = requests.batched ? 0 : static_cast<int>(q);
    const int count = requests.batched ? prompted : 1;
    absl::StatusOr<Completion> completion =
        !reply.status.ok() ? absl::StatusOr<Completion>(reply.status)
        : chat             ? ParseChatReply(reply.body, n)
                           : ParseCompletionsReply(reply.body, n * count);
    if (!completion.ok()) {
      for (int p = first; p < first + count; ++p) {
        prompts.failed.push_back(RowFailure{shard.first_row + prompts.rows[p],
                                            completion.status(),
                                            reply.attempts});
      }
      continue;
    }
    outcome.prompt_tokens += completion->prompt_tokens;
    outcome.completion_tokens += completion->completion_tokens;
    completions[q] = *std::move(completion);
    for (int p = first; p < first + count; ++p) {
      first_choice[p] = &completions[q].choices[(p - first) * n];
    }
  }
  metrics_.BackendTokens(block.backend(), outcome.prompt_tokens,
                         outcome.completion_tokens);

  outcome.rows.reserve(static_cast<size_t>(prompted) * n);
  for (int p = 0; p < prompted; ++p) {
    if (first_choice[p] == nullptr) continue;
    const int64_t r = prompts.rows[p];
    google::protobuf::Struct& input = rows[r];
    for (int s = 0; s < n; ++s) {
      const Choice& choice = first_choice[p][s];
      v1::ResultRow& row = outcome.rows.emplace_back();
      row.set_row_index(shard.first_row + r);
      row.set_sample_index(s);
      if (output_only) {
        // Only the output column: the client joins it with its input.
      } else if (s + 1 == n) {
        // The last sample takes the row; the others copy it.
        *row.mutable_columns() = std::move(input);
      } else {
        *row.mutable_columns() = input;
      }
      (*row.mutable_columns()->mutable_fields())[block.output_column()]
          .set_string_value(choice.text);
      row.set_finish_reason(choice.finish_reason);
    }
  }
  std::sort(prompts.failed.begin(), prompts.failed.end(),
            [](const RowFailure& a, const RowFailure& b) {
              return a.row_index < b.row_index;
            });
  outcome.failed_rows = std::move(prompts.failed);
  return outcome;
}

}  // namespace sdg
