#include "server/scheduling/prompt_counter.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/cancellation_token.h"
#include "base/quote.h"
#include "server/backend/backend.h"
#include "server/backend/tokenize_protocol.h"

namespace sdg {
namespace {

// The counts of one CountTokens call as their replies come in, on the HTTP
// event loop thread.
class Tally {
 public:
  explicit Tally(size_t prompts) : counts_(prompts, 0), pending_(prompts) {}

  void Set(size_t index, absl::StatusOr<int64_t> count) {
    absl::MutexLock lock(&mu_);
    if (count.ok()) {
      counts_[index] = *count;
    } else if (error_.ok()) {
      error_ = count.status();
    }
    --pending_;
  }

  absl::StatusOr<std::vector<int64_t>> Await() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](size_t* pending) { return *pending == 0; }, &pending_));
    if (!error_.ok()) return error_;
    return std::move(counts_);
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> counts_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<int64_t> TokenCount(const BackendReply& reply) {
  if (!reply.status.ok()) {
    return absl::Status(
        reply.status.code(),
        absl::StrCat("counting a prompt's tokens: ", reply.status.message()));
  }
  return ParseTokenizeReply(reply.body);
}

}  // namespace

absl::StatusOr<Backend*> BackendPromptCounter::BackendFor(
    const v1::Block& block) const {
  auto found = backends_.find(block.backend());
  if (found == backends_.end()) {
    // Validation admits only configured backends; this is a wiring bug.
    return absl::InternalError(absl::StrCat("backend ", Quoted(block.backend()),
                                            " is not configured"));
  }
  return found->second;
}

absl::StatusOr<PromptCounter::ServerShape> BackendPromptCounter::Shape(
    const v1::Block& block) {
  absl::StatusOr<Backend*> backend = BackendFor(block);
  if (!backend.ok()) return backend.status();
  CancellationToken never;
  absl::StatusOr<Backend::Traits> traits = (*backend)->WaitForTraits(never);
  if (!traits.ok()) return traits.status();
  return ServerShape{.tokenizer = ServesTokenizer(traits->kind),
                     .batching = traits->batching,
                     .one_choice_per_request = traits->one_choice_per_request,
                     .pace = (*backend)->MeasuredPace()};
}

absl::StatusOr<std::vector<int64_t>> BackendPromptCounter::CountTokens(
    const v1::Block& block, const std::vector<std::string>& prompts) {
  absl::StatusOr<Backend*> found = BackendFor(block);
  if (!found.ok()) return found.status();
  Backend* backend = *found;
  CancellationToken never;
  absl::StatusOr<Backend::Traits> traits = backend->WaitForTraits(never);
  if (!traits.ok()) return traits.status();
  const ServerKind kind = traits->kind;
  if (!ServesTokenizer(kind)) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend ", Quoted(block.backend()), " is ",
                     ServerKindName(kind), ", which serves no tokenizer"));
  }
  auto tally = std::make_shared<Tally>(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    TokenizerRequest request = FirstTokenizerRequest(kind, block, prompts[i]);
    const bool templated = request.path == kApplyTemplatePath;
    backend->PostToServerRoot(
        request.path, std::move(request.body),
        [tally, i, templated, backend](const BackendReply& reply) {
          if (!templated) {
            tally->Set(i, TokenCount(reply));
            return;
          }
          // llama.cpp's chat: the templated text, then its tokens.
          absl::StatusOr<std::string> text =
              reply.status.ok() ? ParseApplyTemplateReply(reply.body)
                                : absl::StatusOr<std::string>(reply.status);
          if (!text.ok()) {
            tally->Set(i, text.status());
            return;
          }
          TokenizerRequest tokenize = LlamaCppTokenizeRequest(*text);
          backend->PostToServerRoot(tokenize.path, std::move(tokenize.body),
                                    [tally, i](const BackendReply& counted) {
                                      tally->Set(i, TokenCount(counted));
                                    });
        });
  }
  return tally->Await();
}

}  // namespace sdg
