#include "server/scheduling/shard_runner.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "server/backend/openai_protocol.h"
#include "server/backend/sample_fanout.h"
#include "server/jobs/batch_line.h"

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

// A shard with no outcome: the job was stopped, or its call could not be
// made.
ShardOutcome Failed(absl::Status status) {
  ShardOutcome outcome;
  outcome.status = std::move(status);
  return outcome;
}

// Hands over an outcome already made.
ShardRunner::Continuation Done(ShardOutcome outcome) {
  return [outcome = std::move(outcome)]() mutable {
    return std::optional<ShardOutcome>(std::move(outcome));
  };
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

// Each of a block shard's rows, rendered or not.
struct BlockPrompts {
  std::vector<std::string> texts;
  std::vector<size_t> prompted;  // their rows, by offset in the shard
  std::vector<RowFailure> failed_rows;
};

}  // namespace

// A call's requests in flight: their replies as they come (on the HTTP loop's
// thread), aborted at once if the job's token is cancelled. A request the
// backend hands back as one to send one sample at a time goes out again as one
// request per sample (sample_fanout.h), and their merged reply takes its place.
// `on_all` runs once, on the thread of the last reply, or on Send's if every
// reply came before it returned.
class BackendShardRunner::RequestBatch
    : public std::enable_shared_from_this<RequestBatch> {
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
      Record(backend, backend.Post(
                          path, std::move(bodies[i]),
                          [self = shared_from_this(), i](BackendReply reply) {
                            self->OnReply(i, std::move(reply));
                          },
                          samples));
    }
    on_cancel_ = token.OnCancel([this] { CancelAll(); });
    Arrive(std::nullopt, {});
  }

  // Requests each to its own backend, one choice each (an OpenAI batch's
  // lines, whose models may be served by different backends).
  void SendEach(absl::string_view path,
                std::vector<std::pair<Backend*, std::string>> requests,
                CancellationToken& token) {
    path_ = path;
    for (size_t i = 0; i < requests.size(); ++i) {
      Backend& backend = *requests[i].first;
      Record(backend,
             backend.Post(path, std::move(requests[i].second),
                          [self = shared_from_this(), i](BackendReply reply) {
                            self->Arrive(i, std::move(reply));
                          }));
    }
    on_cancel_ = token.OnCancel([this] { CancelAll(); });
    Arrive(std::nullopt, {});
  }

  // Once `on_all` has run, in the continuation on a worker: ending the cancel
  // registration may wait for a cancel callback running on another thread
  // (which never waits for this one), so it does not end on the HTTP loop's
  // thread.
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
      Record(*backend_,
             backend_->Post(path_, std::move((*bodies)[s]),
                            [self = shared_from_this(), samples, index,
                             s](BackendReply reply) {
                              if (std::optional<BackendReply> merged =
                                      samples->Add(s, std::move(reply))) {
                                self->Arrive(index, *std::move(merged));
                              }
                            }));
    }
  }

  // A call posted: cancelled at once if the token fired meanwhile.
  void Record(Backend& backend, Backend::CallId call) {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      calls_.emplace_back(&backend, call);
      cancelled = cancelled_;
    }
    if (cancelled) backend.Cancel(call);
  }

  void CancelAll() {
    std::vector<std::pair<Backend*, Backend::CallId>> calls;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      calls = calls_;
    }
    // Outside mu_: a cancelled call completes at once, into Arrive.
    for (auto [backend, call] : calls) backend->Cancel(call);
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

  // Written by Send before any reply can come (SendEach's calls never come
  // back for one sample at a time: they read only path_).
  Backend* backend_ = nullptr;
  absl::string_view path_;
  int samples_ = 1;
  CancellationToken::Registration on_cancel_;
  absl::Mutex mu_;
  std::vector<std::pair<Backend*, Backend::CallId>> calls_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<BackendReply> replies_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  absl::AnyInvocable<void() &&> on_all_;
};

// What a block's shard and an OpenAI batch's share: the shard's rows of
// the dataset, its token and its way back to the workers, and Start, which
// sends (Shard::Send) and hands back the outcome at once when nothing went
// out.
template <typename Shard>
class BackendShardRunner::RowsShard
    : public std::enable_shared_from_this<Shard> {
 public:
  RowsShard(const BackendShardRunner& runner, const JobSpec& spec,
            const ShardSpec& shard, BlockInput rows, CancellationToken& token,
            ShardRunner::Ready ready)
      : runner_(runner),
        spec_(spec),
        shard_(shard),
        rows_(std::move(rows)),
        token_(token),
        ready_(std::move(ready)) {}

  void Start() {
    if (std::optional<ShardOutcome> outcome =
            static_cast<Shard*>(this)->Send()) {
      ready_(Done(*std::move(outcome)));
    }
  }

 protected:
  const BackendShardRunner& runner_;
  const JobSpec& spec_;
  const ShardSpec shard_;
  BlockInput rows_;
  CancellationToken& token_;
  ShardRunner::Ready ready_;
};

// A block's shard: its prompts sent as one call, and its result rows built
// from the replies in the continuation.
class BackendShardRunner::BlockShard : public RowsShard<BlockShard> {
 public:
  using RowsShard::RowsShard;

 private:
  friend class RowsShard<BlockShard>;

  // Renders and sends the prompts: nullopt once they are out (the last
  // reply hands the shard to `ready`), or the outcome when none was sent.
  std::optional<ShardOutcome> Send() {
    if (token_.IsCancelled()) return Failed(token_.reason());
    std::vector<std::string> texts;
    texts.reserve(rows_.size());
    size_t shard_bytes = 0;
    for (size_t r = 0; r < rows_.size(); ++r) {
      absl::StatusOr<std::string> prompt =
          RenderPrompt(spec_, spec_.prompt_template, rows_[r], shard_bytes);
      if (!prompt.ok()) {
        failed_rows_.push_back(RowFailure{
            shard_.first_row + static_cast<int64_t>(r), prompt.status(), 0});
        continue;
      }
      texts.push_back(*std::move(prompt));
      prompted_.push_back(r);
    }
    if (texts.empty()) return Outcome(Generations{});
    absl::StatusOr<Call> call = runner_.PrepareCall(
        spec_.block, texts, token_, [self = shared_from_this()]() mutable {
          self->ready_([self] { return self->Continue(); });
        });
    if (!call.ok()) return Failed(call.status());
    call_ = *std::move(call);
    SendCall(call_, token_);
    return std::nullopt;
  }

  std::optional<ShardOutcome> Continue() {
    absl::StatusOr<Generations> generations =
        runner_.CollectCall(spec_.block, spec_.tenant, call_, token_);
    if (!generations.ok()) return Failed(generations.status());
    return Outcome(*std::move(generations));
  }

  // The shard's result rows: each prompted row's n samples in row order.
  ShardOutcome Outcome(Generations generations) {
    const v1::Block& block = spec_.block;
    ShardOutcome outcome;
    outcome.failed_rows = std::move(failed_rows_);
    outcome.usage = generations.usage;
    const bool output_only =
        spec_.result_columns == v1::RESULT_COLUMNS_OUTPUT_ONLY;
    const int n = block.n();
    outcome.rows.reserve(prompted_.size() * n);
    for (size_t p = 0; p < prompted_.size(); ++p) {
      const int64_t row_index =
          shard_.first_row + static_cast<int64_t>(prompted_[p]);
      if (!generations.choices[p].ok()) {
        outcome.failed_rows.push_back(
            RowFailure{row_index, generations.choices[p].status(),
                       generations.attempts[p]});
        continue;
      }
      google::protobuf::Struct& input = rows_[prompted_[p]];
      const std::vector<Choice>& choices = *generations.choices[p];
      for (int s = 0; s < n; ++s) {
        v1::ResultRow& row = outcome.rows.emplace_back();
        row.set_row_index(row_index);
        row.set_sample_index(s);
        if (output_only) {
          // Only the output column: the client joins it with its input.
        } else if (s + 1 == n) {
          // The last sample takes the row; the others copy it.
          // NOLINTNEXTLINE(bugprone-use-after-move): moved at s + 1 == n only
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

  std::vector<size_t> prompted_;  // the rows with a prompt, by offset
  std::vector<RowFailure> failed_rows_;
  Call call_;
};

// An OpenAI batch's shard: each line's body sent as it is to the backend
// that serves its model, and each reply kept whole: a 2xx reply is the
// line's result row (custom_id, status_code, request_id, body: the reply's
// JSON text), any other ends the line as a failed row with its HTTP
// status (batch_line.h writes both into the batch's files).
class BackendShardRunner::BatchShard : public RowsShard<BatchShard> {
 public:
  using RowsShard::RowsShard;

 private:
  friend class RowsShard<BatchShard>;

  std::optional<ShardOutcome> Send() {
    if (token_.IsCancelled()) return Failed(token_.reason());
    std::vector<std::pair<Backend*, std::string>> requests;
    for (size_t r = 0; r < rows_.size(); ++r) {
      const int64_t row_index = shard_.first_row + static_cast<int64_t>(r);
      ParsedBatchLine parsed = ParseBatchLine(RowLine(rows_[r]), row_index + 1);
      // Admission checked every line: one that fails here was changed in
      // the store.
      if (!parsed.line.has_value()) {
        failed_rows_.push_back(RowFailure{
            row_index, absl::InvalidArgumentError(parsed.error.message()), 0});
        continue;
      }
      requests.emplace_back(
          runner_.BackendForModel(spec_.block.backend(), parsed.line->model),
          std::move(parsed.line->body));
      custom_ids_.push_back(std::move(parsed.line->custom_id));
      sent_.push_back(row_index);
    }
    if (requests.empty()) return Outcome({});
    batch_ = std::make_shared<RequestBatch>(
        requests.size(), [self = shared_from_this()]() mutable {
          self->ready_([self] { return self->Continue(); });
        });
    // The line's url without the base URLs' /v1.
    const absl::string_view path =
        absl::string_view(spec_.openai_batch->endpoint()).substr(3);
    std::shared_ptr<RequestBatch> batch = batch_;
    batch->SendEach(path, std::move(requests), token_);
    return std::nullopt;
  }

  std::optional<ShardOutcome> Continue() {
    std::vector<BackendReply> replies = batch_->TakeReplies();
    if (token_.IsCancelled()) return Failed(token_.reason());
    return Outcome(std::move(replies));
  }

  ShardOutcome Outcome(std::vector<BackendReply> replies) {
    ShardOutcome outcome;
    outcome.failed_rows = std::move(failed_rows_);
    for (size_t q = 0; q < replies.size(); ++q) {
      BackendReply& reply = replies[q];
      if (!reply.status.ok()) {
        outcome.failed_rows.push_back(
            RowFailure{sent_[q], std::move(reply.status), reply.attempts,
                       reply.http_status});
        continue;
      }
      if (std::optional<TokenCost> usage = ReplyUsage(reply.body)) {
        v1::TokenUsage& total = outcome.usage;
        total.set_prompt_tokens(total.prompt_tokens() + usage->input);
        total.set_completion_tokens(total.completion_tokens() + usage->output);
      }
      v1::ResultRow& row = outcome.rows.emplace_back();
      row.set_row_index(sent_[q]);
      auto& columns = *row.mutable_columns()->mutable_fields();
      columns["custom_id"].set_string_value(std::move(custom_ids_[q]));
      columns["status_code"].set_number_value(reply.http_status);
      columns["request_id"].set_string_value(
          BatchRequestId(spec_.job_id, sent_[q]));
      columns["body"].set_string_value(std::move(reply.body));
    }
    std::sort(outcome.failed_rows.begin(), outcome.failed_rows.end(),
              [](const RowFailure& a, const RowFailure& b) {
                return a.row_index < b.row_index;
              });
    runner_.metrics_.BackendTokens(spec_.block.backend(), spec_.tenant,
                                   outcome.usage.prompt_tokens(),
                                   outcome.usage.completion_tokens());
    return outcome;
  }

  // The lines sent, in order: their rows and custom_ids.
  std::vector<int64_t> sent_;
  std::vector<std::string> custom_ids_;
  std::vector<RowFailure> failed_rows_;
  std::shared_ptr<RequestBatch> batch_;
};

// A pipeline stage's shard: its steps in order, column steps on the worker,
// each LLM step's prompts sent as one call and its replies expanded in the
// continuation, which runs on to the next LLM step or the stage's end.
class BackendShardRunner::StageShard
    : public std::enable_shared_from_this<StageShard> {
 public:
  StageShard(const BackendShardRunner& runner, const JobSpec& spec,
             StageInput input, CancellationToken& token,
             ShardRunner::Ready ready)
      : runner_(runner),
        spec_(spec),
        pipeline_(*spec.pipeline),
        stage_(input.stage),
        rows_(std::move(input.rows)),
        next_step_(pipeline_.stages[stage_].first_step),
        token_(token),
        ready_(std::move(ready)) {}

  void Start() {
    if (std::optional<ShardOutcome> outcome = Advance()) {
      ready_(Done(*std::move(outcome)));
    }
  }

 private:
  // Runs the steps from next_step_ on: nullopt once an LLM step's requests
  // are out (the last reply hands the shard to ready_), or the outcome once
  // the stage has run.
  std::optional<ShardOutcome> Advance() {
    const int end_step = pipeline_.stages[stage_].end_step;
    for (; next_step_ < end_step; ++next_step_) {
      if (token_.IsCancelled()) return Stopped(token_.reason());
      const StepSpec& step = pipeline_.steps[next_step_];
      v1::StepCounts& counts = outcome_.steps.emplace_back();
      counts.set_step(step.name);
      counts.set_rows_in(static_cast<int64_t>(rows_.size()));
      if (step.llm() == nullptr) {
        EndStep(step, ApplyColumnStep(step, std::move(rows_)));
        continue;
      }
      absl::StatusOr<bool> sent = SendLlmStep(*step.llm());
      if (!sent.ok()) return Stopped(sent.status());
      // Past this, another worker may be running the continuation.
      if (*sent) return std::nullopt;
      EndStep(step, ExpandLlmStep(step));
    }
    outcome_.rows = std::move(rows_);
    return std::move(outcome_);
  }

  // The shard stopped as a whole (no outcome); the tokens its earlier LLM
  // steps used still count.
  ShardOutcome Stopped(absl::Status status) {
    ShardOutcome outcome = Failed(std::move(status));
    outcome.usage = outcome_.usage;
    return outcome;
  }

  // Renders the step's prompts and sends them; false when no row has one.
  absl::StatusOr<bool> SendLlmStep(const LlmStepSpec& llm) {
    PrepareLlmRows(llm, rows_);
    texts_.assign(rows_.size(), std::vector<std::string>{});
    attempts_.assign(rows_.size(), 0);
    prompted_.clear();
    std::vector<std::string> prompts;
    size_t shard_bytes = 0;
    for (size_t r = 0; r < rows_.size(); ++r) {
      absl::StatusOr<std::string> prompt = RenderPrompt(
          spec_, llm.prompt_template, rows_[r].columns(), shard_bytes);
      if (!prompt.ok()) {
        texts_[r] = prompt.status();
        continue;
      }
      // LLMBlock strips the rendered prompt.
      prompts.emplace_back(PythonStrip(*prompt));
      prompted_.push_back(r);
    }
    if (prompts.empty()) return false;
    SDG_ASSIGN_OR_RETURN(
        call_,
        runner_.PrepareCall(llm.block, prompts, token_,
                            [self = shared_from_this()]() mutable {
                              self->ready_([self] { return self->Continue(); });
                            }));
    SendCall(call_, token_);
    return true;
  }

  // The LLM step's replies are in.
  std::optional<ShardOutcome> Continue() {
    const StepSpec& step = pipeline_.steps[next_step_];
    absl::StatusOr<Generations> generated =
        runner_.CollectCall(step.llm()->block, spec_.tenant, call_, token_);
    if (!generated.ok()) return Stopped(generated.status());
    // The step's counts were started when the step was.
    AddUsage(generated->usage, *outcome_.steps.back().mutable_usage());
    AddUsage(generated->usage, outcome_.usage);
    for (size_t p = 0; p < prompted_.size(); ++p) {
      const size_t r = prompted_[p];
      attempts_[r] = generated->attempts[p];
      if (!generated->choices[p].ok()) {
        texts_[r] = generated->choices[p].status();
        continue;
      }
      std::vector<std::string>& row_texts = *texts_[r];
      for (Choice& choice : *generated->choices[p]) {
        row_texts.push_back(std::move(choice.text));
      }
    }
    EndStep(step, ExpandLlmStep(step));
    ++next_step_;
    return Advance();
  }

  StepOutput ExpandLlmStep(const StepSpec& step) {
    return ExpandGenerations(step, std::move(rows_), std::move(texts_),
                             attempts_);
  }

  // The step's output becomes the next step's input; its counts complete.
  void EndStep(const StepSpec& step, StepOutput out) {
    const StageSpec& range = pipeline_.stages[stage_];
    if (step.index + 1 == range.end_step && !pipeline_.IsLastStage(stage_)) {
      // The barrier needs every row's drop_duplicates key.
      std::vector<PipelineRowFailure> keyless =
          TakeRowsWithoutKey(step, out.rows);
      std::move(keyless.begin(), keyless.end(), std::back_inserter(out.failed));
    }
    v1::StepCounts& counts = outcome_.steps.back();
    counts.set_rows_out(static_cast<int64_t>(out.rows.size()));
    counts.set_rows_failed(static_cast<int64_t>(out.failed.size()));
    runner_.metrics_.StepRows(step.index, counts.rows_in(), counts.rows_out(),
                              counts.rows_failed());
    std::move(out.failed.begin(), out.failed.end(),
              std::back_inserter(outcome_.failed_steps));
    rows_ = std::move(out.rows);
  }

  const BackendShardRunner& runner_;
  const JobSpec& spec_;
  const PipelineSpec& pipeline_;
  const int stage_;
  std::vector<PipelineRow> rows_;  // the next step's input
  int next_step_;                  // in pipeline_.steps
  ShardOutcome outcome_;           // steps' counts, failures and tokens
  // The LLM step in flight: each row's texts (or why it has none), its
  // requests' attempts, and the rows that have a prompt.
  std::vector<absl::StatusOr<std::vector<std::string>>> texts_;
  std::vector<int> attempts_;
  std::vector<size_t> prompted_;
  CancellationToken& token_;
  ShardRunner::Ready ready_;
  Call call_;
};

void BackendShardRunner::Start(const JobSpec& spec, const ShardSpec& shard,
                               ShardInput input, CancellationToken& token,
                               Ready ready) {
  if (auto* stage = std::get_if<StageInput>(&input)) {
    std::make_shared<StageShard>(*this, spec, std::move(*stage), token,
                                 std::move(ready))
        ->Start();
    return;
  }
  if (spec.openai_batch.has_value()) {
    std::make_shared<BatchShard>(*this, spec, shard,
                                 std::get<BlockInput>(std::move(input)), token,
                                 std::move(ready))
        ->Start();
    return;
  }
  std::make_shared<BlockShard>(*this, spec, shard,
                               std::get<BlockInput>(std::move(input)), token,
                               std::move(ready))
      ->Start();
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

Backend* BackendShardRunner::BackendForModel(const std::string& fallback,
                                             const std::string& model) const {
  Backend* first = backends_.at(fallback);
  if (first->ServesModel(model)) return first;
  for (const auto& [name, backend] : backends_) {
    if (backend->ServesModel(model)) return backend;
  }
  return first;
}

absl::StatusOr<BackendShardRunner::Call> BackendShardRunner::PrepareCall(
    const v1::Block& block, const std::vector<std::string>& prompts,
    CancellationToken& token, absl::AnyInvocable<void() &&> on_replied) const {
  Call call;
  SDG_ASSIGN_OR_RETURN(call.backend, BackendFor(block));
  call.prompt_count = prompts.size();
  call.samples = block.n();
  const bool chat = block.api() == v1::API_CHAT;
  call.requests.path = chat ? kChatCompletionsPath : kCompletionsPath;
  if (!chat && prompts.size() > 1) {
    absl::StatusOr<bool> batching =
        call.backend->WaitForBatchingDecision(token);
    if (token.IsCancelled()) return token.reason();
    if (!batching.ok()) return batching.status();
    call.requests.batched = *batching;
  }
  std::vector<std::string>& bodies = call.requests.bodies;
  if (call.requests.batched) {
    bodies.push_back(BuildCompletionsBody(block, prompts));
  } else {
    bodies.reserve(prompts.size());
    for (const std::string& prompt : prompts) {
      bodies.push_back(chat ? BuildChatBody(block, prompt)
                            : BuildCompletionsBody(block, {prompt}));
    }
  }
  call.batch =
      std::make_shared<RequestBatch>(bodies.size(), std::move(on_replied));
  return call;
}

void BackendShardRunner::SendCall(Call& call, CancellationToken& token) {
  // Read before sending: `call` may be read again (CollectCall) on another
  // thread as soon as the last reply is in.
  std::shared_ptr<RequestBatch> batch = call.batch;
  Backend& backend = *call.backend;
  const absl::string_view path = call.requests.path;
  const int samples = call.samples;
  batch->Send(backend, path, std::exchange(call.requests.bodies, {}), samples,
              token);
}

absl::StatusOr<BackendShardRunner::Generations> BackendShardRunner::CollectCall(
    const v1::Block& block, const std::string& tenant, Call& call,
    CancellationToken& token) const {
  std::vector<BackendReply> replies = call.batch->TakeReplies();
  if (token.IsCancelled()) return token.reason();
  return ReadReplies(block, tenant, call.requests, call.prompt_count,
                     std::move(replies));
}

BackendShardRunner::Generations BackendShardRunner::ReadReplies(
    const v1::Block& block, const std::string& tenant, const Requests& requests,
    size_t prompt_count, std::vector<BackendReply> replies) const {
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
    generations.usage.set_prompt_tokens(generations.usage.prompt_tokens() +
                                        completion->prompt_tokens);
    generations.usage.set_completion_tokens(
        generations.usage.completion_tokens() + completion->completion_tokens);
    for (size_t p = first; p < first + count; ++p) {
      auto begin = completion->choices.begin() + (p - first) * n;
      generations.choices[p] = std::vector<Choice>(
          std::make_move_iterator(begin), std::make_move_iterator(begin + n));
    }
  }
  metrics_.BackendTokens(block.backend(), tenant,
                         generations.usage.prompt_tokens(),
                         generations.usage.completion_tokens());
  return generations;
}

}  // namespace sdg
