#include "server/scheduling/shard_runner.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/backend/openai_protocol.h"
#include "server/backend/sample_fanout.h"

namespace sdg {
namespace {

// The n replies of one request sent as one request per sample: merged, in
// sample order, once the last has come.
class SampleReplies {
 public:
  explicit SampleReplies(int samples)
      : replies_(samples), remaining_(samples) {}

  // The merged reply once `reply` is the last of them.
  std::optional<BackendReply> Add(int sample, BackendReply reply) {
    absl::MutexLock lock(&mu_);
    replies_[sample] = std::move(reply);
    if (--remaining_ > 0) return std::nullopt;
    return MergeSamples(std::move(replies_));
  }

 private:
  absl::Mutex mu_;
  std::vector<BackendReply> replies_ ABSL_GUARDED_BY(mu_);
  int remaining_ ABSL_GUARDED_BY(mu_);
};

// A shard's requests in flight, for the blocking and the non-blocking path
// alike: their replies as they come (on the HTTP loop's thread), aborted at
// once if the job's token is cancelled. A request the backend hands back as
// one to send one sample at a time goes out again as one request per sample
// (sample_fanout.h), and their merged reply takes its place. `on_all` runs
// once, on the thread of the last reply, or on Send's if every reply came
// before it returned.
class RequestBatch : public std::enable_shared_from_this<RequestBatch> {
 public:
  RequestBatch(size_t count, absl::AnyInvocable<void() &&> on_all)
      : replies_(count),
        remaining_(count + 1),  // each reply, and the end of Send
        on_all_(std::move(on_all)) {}

  // `samples`: the n of every body.
  void Send(Backend& backend, absl::string_view path,
            std::vector<std::string> bodies, int samples,
            CancellationToken& token) {
    backend_ = &backend;
    path_ = path;
    samples_ = samples;
    for (size_t i = 0; i < bodies.size(); ++i) {
      Record(backend.Post(
          path, std::move(bodies[i]),
          [self = shared_from_this(), i](BackendReply reply) {
            self->OnReply(i, std::move(reply));
          },
          samples));
    }
    on_cancel_ = token.OnCancel([this] { CancelAll(); });
    Arrive(std::nullopt, {});
  }

  // Once `on_all` has run, on a worker: ending the cancel registration may
  // wait for a cancel callback running on another thread (which never waits
  // for this one), so it does not end on the HTTP loop's thread.
  std::vector<BackendReply> TakeReplies() {
    on_cancel_ = {};
    absl::MutexLock lock(&mu_);
    return std::move(replies_);
  }

 private:
  void OnReply(size_t index, BackendReply reply) {
    if (!reply.one_choice_per_request) {
      Arrive(index, std::move(reply));
      return;
    }
    absl::StatusOr<std::vector<std::string>> bodies =
        SplitSamples(reply.body, samples_);
    if (!bodies.ok()) {
      Arrive(index, BackendReply{bodies.status(), "", reply.attempts});
      return;
    }
    auto samples = std::make_shared<SampleReplies>(samples_);
    for (int s = 0; s < samples_; ++s) {
      Record(backend_->Post(
          path_, std::move((*bodies)[s]),
          [self = shared_from_this(), samples, index, s](BackendReply reply) {
            if (std::optional<BackendReply> merged =
                    samples->Add(s, std::move(reply))) {
              self->Arrive(index, *std::move(merged));
            }
          }));
    }
  }

  // A call posted: cancelled at once if the token fired meanwhile.
  void Record(Backend::CallId call) {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(call);
      cancelled = cancelled_;
    }
    if (cancelled) backend_->Cancel(call);
  }

  void CancelAll() {
    std::vector<Backend::CallId> calls;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      calls = calls_;
    }
    // Outside mu_: a cancelled call completes at once, into Arrive.
    for (Backend::CallId call : calls) backend_->Cancel(call);
  }

  // A reply (or, with no index, the end of Send) has come.
  void Arrive(std::optional<size_t> index, BackendReply reply) {
    {
      absl::MutexLock lock(&mu_);
      if (index.has_value()) replies_[*index] = std::move(reply);
      if (--remaining_ > 0) return;
    }
    // The last arrival: nothing else touches on_all_ any more.
    absl::AnyInvocable<void()&&> on_all = std::move(on_all_);
    std::move(on_all)();
  }

  // Written by Send before any reply can come.
  Backend* backend_ = nullptr;
  absl::string_view path_;
  int samples_ = 1;
  CancellationToken::Registration on_cancel_;
  absl::Mutex mu_;
  std::vector<Backend::CallId> calls_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<BackendReply> replies_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  absl::AnyInvocable<void() &&> on_all_;
};

ShardOutcome Failed(absl::Status status, int attempts = 0) {
  ShardOutcome outcome;
  outcome.status = std::move(status);
  outcome.attempts = attempts;
  return outcome;
}

// A row's prompt, or why it has none: a missing column, over
// --max_prompt_bytes, or past the shard's budget (`shard_bytes` so far).
absl::StatusOr<std::string> RenderPrompt(const JobSpec& spec,
                                         const PromptTemplate& prompt_template,
                                         const google::protobuf::Struct& row,
                                         size_t& shard_bytes) {
  absl::StatusOr<std::string> prompt =
      prompt_template.Render(row, spec.max_prompt_bytes);
  if (prompt.ok() &&
      shard_bytes + prompt->size() > spec.max_shard_prompt_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shard's prompts are longer than ", spec.max_shard_prompt_bytes,
        " bytes (the server's --max_shard_prompt_bytes); use a smaller "
        "batch_size"));
  }
  if (prompt.ok()) shard_bytes += prompt->size();
  return prompt;
}

}  // namespace

// A block's shard from Start to its Finish: its requests in flight and the
// shard's rows for the result. Its last reply hands it to the scheduler
// (resume).
class BackendShardRunner::InFlight
    : public std::enable_shared_from_this<InFlight> {
 public:
  InFlight(const JobSpec& spec, const ShardSpec& shard,
           std::vector<google::protobuf::Struct> rows, Prompts prompts,
           size_t prompt_count, Requests requests, CancellationToken& token)
      : spec_(spec),
        shard_(shard),
        rows_(std::move(rows)),
        prompts_(std::move(prompts)),
        prompt_count_(prompt_count),
        requests_(std::move(requests)),
        token_(token) {}

  // Sends the requests; the shard may be resumed before this returns.
  void Send(const BackendShardRunner& runner, Backend& backend, Resume resume) {
    batch_ = std::make_shared<RequestBatch>(
        requests_.bodies.size(), [&runner, self = shared_from_this(),
                                  resume = std::move(resume)]() mutable {
          std::move(resume)([&runner, self = std::move(self)] {
            return self->Finish(runner);
          });
        });
    batch_->Send(backend, requests_.path, std::exchange(requests_.bodies, {}),
                 spec_.block.n(), token_);
  }

 private:
  ShardOutcome Finish(const BackendShardRunner& runner) {
    std::vector<BackendReply> replies = batch_->TakeReplies();
    // A stopped job reports its own reason, not its aborted requests'.
    if (token_.IsCancelled()) return Failed(token_.reason());
    Generations generations = runner.ReadReplies(
        spec_.block, requests_, prompt_count_, std::move(replies));
    return BlockOutcome(spec_, shard_, std::move(rows_), std::move(prompts_),
                        std::move(generations));
  }

  const JobSpec& spec_;
  const ShardSpec shard_;
  std::vector<google::protobuf::Struct> rows_;
  Prompts prompts_;  // their texts moved into the requests
  const size_t prompt_count_;
  Requests requests_;  // their bodies moved into batch_
  CancellationToken& token_;
  std::shared_ptr<RequestBatch> batch_;
};

void BackendShardRunner::Start(const JobSpec& spec, const ShardSpec& shard,
                               std::vector<google::protobuf::Struct> rows,
                               CancellationToken& token, Resume resume) {
  auto finish_now = [&resume](ShardOutcome outcome) {
    std::move(resume)([outcome = std::move(outcome)]() mutable {
      return std::move(outcome);
    });
  };
  if (token.IsCancelled()) return finish_now(Failed(token.reason()));
  Prompts prompts;
  prompts.texts.reserve(rows.size());
  size_t shard_bytes = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    absl::StatusOr<std::string> prompt =
        RenderPrompt(spec, spec.prompt_template, rows[r], shard_bytes);
    if (!prompt.ok()) {
      prompts.failed_rows.push_back(RowFailure{
          shard.first_row + static_cast<int64_t>(r), prompt.status(), 0});
      continue;
    }
    prompts.texts.push_back(*std::move(prompt));
    prompts.prompted.push_back(r);
  }
  if (prompts.texts.empty()) {
    return finish_now(BlockOutcome(spec, shard, std::move(rows),
                                   std::move(prompts), Generations{}));
  }
  absl::StatusOr<Backend*> backend = BackendFor(spec.block);
  if (!backend.ok()) return finish_now(Failed(backend.status()));
  const size_t prompt_count = prompts.texts.size();
  absl::StatusOr<Requests> requests = BuildRequests(
      spec.block, std::exchange(prompts.texts, {}), **backend, token);
  if (!requests.ok()) return finish_now(Failed(requests.status()));
  std::make_shared<InFlight>(spec, shard, std::move(rows), std::move(prompts),
                             prompt_count, *std::move(requests), token)
      ->Send(*this, **backend, std::move(resume));
}

ShardOutcome BackendShardRunner::BlockOutcome(
    const JobSpec& spec, const ShardSpec& shard,
    std::vector<google::protobuf::Struct> rows, Prompts prompts,
    Generations generations) {
  const v1::Block& block = spec.block;
  ShardOutcome outcome;
  outcome.failed_rows = std::move(prompts.failed_rows);
  outcome.prompt_tokens = generations.prompt_tokens;
  outcome.completion_tokens = generations.completion_tokens;

  const bool output_only =
      spec.result_columns == v1::RESULT_COLUMNS_OUTPUT_ONLY;
  const int n = block.n();
  const std::vector<size_t>& prompted = prompts.prompted;
  outcome.rows.reserve(prompted.size() * n);
  for (size_t p = 0; p < prompted.size(); ++p) {
    const int64_t row_index =
        shard.first_row + static_cast<int64_t>(prompted[p]);
    if (!generations.choices[p].ok()) {
      outcome.failed_rows.push_back(RowFailure{
          row_index, generations.choices[p].status(), generations.attempts[p]});
      continue;
    }
    google::protobuf::Struct& input = rows[prompted[p]];
    const std::vector<Choice>& choices = *generations.choices[p];
    for (int s = 0; s < n; ++s) {
      v1::ResultRow& row = outcome.rows.emplace_back();
      row.set_row_index(row_index);
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
          .set_string_value(choices[s].text);
      row.set_finish_reason(choices[s].finish_reason);
    }
  }
  std::sort(outcome.failed_rows.begin(), outcome.failed_rows.end(),
            [](const RowFailure& a, const RowFailure& b) {
              return a.row_index < b.row_index;
            });
  return outcome;
}

ShardOutcome BackendShardRunner::RunStage(const JobSpec& spec,
                                          const ShardSpec& shard, int stage,
                                          std::vector<PipelineRow> rows,
                                          CancellationToken& token) {
  if (token.IsCancelled()) return Failed(token.reason());
  const PipelineSpec& pipeline = *spec.pipeline;
  const StageSpec& range = pipeline.stages[stage];
  ShardOutcome outcome;
  for (int i = range.first_step; i < range.end_step; ++i) {
    const StepSpec& step = pipeline.steps[i];
    v1::StepCounts& counts = outcome.steps.emplace_back();
    counts.set_step(step.name);
    counts.set_rows_in(static_cast<int64_t>(rows.size()));
    StepOutput out;
    if (step.llm() != nullptr) {
      absl::StatusOr<StepOutput> generated =
          RunLlmStep(spec, step, std::move(rows), outcome, token);
      if (!generated.ok()) return Failed(generated.status());
      out = *std::move(generated);
    } else {
      out = ApplyColumnStep(step, std::move(rows));
    }
    if (i + 1 == range.end_step && !pipeline.IsLastStage(stage)) {
      // The barrier needs every row's drop_duplicates key.
      std::vector<PipelineRowFailure> keyless =
          TakeRowsWithoutKey(step, out.rows);
      std::move(keyless.begin(), keyless.end(), std::back_inserter(out.failed));
    }
    counts.set_rows_out(static_cast<int64_t>(out.rows.size()));
    counts.set_rows_failed(static_cast<int64_t>(out.failed.size()));
    metrics_.StepRows(step.index, counts.rows_in(), counts.rows_out(),
                      counts.rows_failed());
    std::move(out.failed.begin(), out.failed.end(),
              std::back_inserter(outcome.failed_steps));
    rows = std::move(out.rows);
  }
  outcome.rows = std::move(rows);
  return outcome;
}

absl::StatusOr<StepOutput> BackendShardRunner::RunLlmStep(
    const JobSpec& spec, const StepSpec& step, std::vector<PipelineRow> rows,
    ShardOutcome& outcome, CancellationToken& token) const {
  const LlmStepSpec& llm = *step.llm();
  PrepareLlmRows(llm, rows);
  std::vector<absl::StatusOr<std::vector<std::string>>> texts(
      rows.size(), std::vector<std::string>{});
  std::vector<int> attempts(rows.size(), 0);
  std::vector<std::string> prompts;
  std::vector<size_t> prompted;
  size_t shard_bytes = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    absl::StatusOr<std::string> prompt =
        RenderPrompt(spec, llm.prompt_template, rows[r].columns(), shard_bytes);
    if (!prompt.ok()) {
      texts[r] = prompt.status();
      continue;
    }
    // LLMBlock strips the rendered prompt.
    prompts.emplace_back(PythonStrip(*prompt));
    prompted.push_back(r);
  }
  if (!prompts.empty()) {
    absl::StatusOr<Generations> generated =
        Generate(llm.block, std::move(prompts), token);
    if (!generated.ok()) return generated.status();
    outcome.prompt_tokens += generated->prompt_tokens;
    outcome.completion_tokens += generated->completion_tokens;
    for (size_t p = 0; p < prompted.size(); ++p) {
      const size_t r = prompted[p];
      attempts[r] = generated->attempts[p];
      if (!generated->choices[p].ok()) {
        texts[r] = generated->choices[p].status();
        continue;
      }
      std::vector<std::string>& row_texts = *texts[r];
      for (Choice& choice : *generated->choices[p]) {
        row_texts.push_back(std::move(choice.text));
      }
    }
  }
  return ExpandGenerations(step, std::move(rows), std::move(texts), attempts);
}

absl::StatusOr<Backend*> BackendShardRunner::BackendFor(
    const v1::Block& block) const {
  auto found = backends_.find(block.backend());
  if (found == backends_.end()) {
    // Validation admits only configured backends; this is a wiring bug.
    return absl::InternalError(
        absl::StrCat("backend \"", block.backend(), "\" is not configured"));
  }
  return found->second;
}

absl::StatusOr<BackendShardRunner::Generations> BackendShardRunner::Generate(
    const v1::Block& block, std::vector<std::string> prompts,
    CancellationToken& token) const {
  absl::StatusOr<Backend*> backend = BackendFor(block);
  if (!backend.ok()) return backend.status();
  const size_t prompt_count = prompts.size();
  absl::StatusOr<Requests> requests =
      BuildRequests(block, std::move(prompts), **backend, token);
  if (!requests.ok()) return requests.status();
  std::vector<BackendReply> replies =
      SendAndWait(**backend, requests->path,
                  std::exchange(requests->bodies, {}), block.n(), token);
  // A stopped job reports its own reason, not its aborted requests'.
  if (token.IsCancelled()) return token.reason();
  return ReadReplies(block, *requests, prompt_count, std::move(replies));
}

BackendShardRunner::Generations BackendShardRunner::ReadReplies(
    const v1::Block& block, const Requests& requests, size_t prompt_count,
    std::vector<BackendReply> replies) const {
  const bool chat = block.api() == v1::API_CHAT;
  const int n = block.n();
  Generations generations;
  generations.choices.resize(prompt_count, std::vector<Choice>{});
  generations.attempts.resize(prompt_count, 0);
  for (size_t q = 0; q < replies.size(); ++q) {
    BackendReply& reply = replies[q];
    // The prompts this request carried.
    const size_t first = requests.batched ? 0 : q;
    const size_t count = requests.batched ? prompt_count : 1;
    absl::StatusOr<Completion> completion =
        !reply.status.ok() ? absl::StatusOr<Completion>(reply.status)
        : chat             ? ParseChatReply(reply.body, n)
               : ParseCompletionsReply(reply.body, n * static_cast<int>(count));
    for (size_t p = first; p < first + count; ++p) {
      generations.attempts[p] = reply.attempts;
    }
    if (!completion.ok()) {
      for (size_t p = first; p < first + count; ++p) {
        generations.choices[p] = completion.status();
      }
      continue;
    }
    generations.prompt_tokens += completion->prompt_tokens;
    generations.completion_tokens += completion->completion_tokens;
    for (size_t p = first; p < first + count; ++p) {
      auto begin = completion->choices.begin() + (p - first) * n;
      generations.choices[p] = std::vector<Choice>(
          std::make_move_iterator(begin), std::make_move_iterator(begin + n));
    }
  }
  metrics_.BackendTokens(block.backend(), generations.prompt_tokens,
                         generations.completion_tokens);
  return generations;
}

absl::StatusOr<BackendShardRunner::Requests> BackendShardRunner::BuildRequests(
    const v1::Block& block, std::vector<std::string> prompts, Backend& backend,
    CancellationToken& token) const {
  const bool chat = block.api() == v1::API_CHAT;
  Requests requests;
  requests.path = chat ? kChatCompletionsPath : kCompletionsPath;
  if (!chat && prompts.size() > 1) {
    absl::StatusOr<bool> batching = backend.WaitForBatchingDecision(token);
    if (token.IsCancelled()) return token.reason();
    if (!batching.ok()) return batching.status();
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
    int samples, CancellationToken& token) const {
  absl::Notification all_replied;
  auto batch = std::make_shared<RequestBatch>(
      bodies.size(), [&all_replied] { all_replied.Notify(); });
  batch->Send(backend, path, std::move(bodies), samples, token);
  all_replied.WaitForNotification();
  return batch->TakeReplies();
}

}  // namespace sdg
