// The shard runner against llmsim over real HTTP, with the test as the
// scheduler's worker: Start returns while a shard's requests are in flight,
// every reply hands the shard back (one hand-back per LLM call: a block's
// one, each LLM step of a pipeline stage), and a shard waiting on the
// backend stops at once when its job is cancelled.
#include "server/scheduling/shard_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/util/json_util.h"
#include "server/backend/backend.h"
#include "server/http/http_client.h"
#include "server/jobs/job_spec.h"
#include "tests/testing/sim_thread.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Takes the runner's hand-backs and runs them as a worker would.
class Worker {
 public:
  ShardRunner::Ready Ready() {
    return [this](ShardRunner::Continuation continuation) {
      absl::MutexLock lock(&mu_);
      handed_back_.push_back(std::move(continuation));
      ++hand_backs_;
    };
  }
  int hand_backs() {
    absl::MutexLock lock(&mu_);
    return hand_backs_;
  }
  // Runs the shard's continuations, each once it is handed back, until one
  // returns the outcome. `continued` counts those that sent more requests.
  ShardOutcome RunToOutcome(int* continued = nullptr) {
    while (true) {
      ShardRunner::Continuation next;
      {
        absl::MutexLock lock(&mu_);
        auto handed_back = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return !handed_back_.empty();
        };
        mu_.Await(absl::Condition(&handed_back));
        next = std::move(handed_back_.front());
        handed_back_.pop_front();
      }
      if (std::optional<ShardOutcome> outcome = std::move(next)()) {
        return *std::move(outcome);
      }
      if (continued != nullptr) ++*continued;
    }
  }

 private:
  absl::Mutex mu_;
  std::deque<ShardRunner::Continuation> handed_back_ ABSL_GUARDED_BY(mu_);
  int hand_backs_ ABSL_GUARDED_BY(mu_) = 0;
};

class ShardRunnerTest : public ::testing::Test {
 protected:
  void StartBackend(llmsim::SimServer::Options sim_options = {}) {
    sim_ = std::make_unique<testing::SimThread>(std::move(sim_options));
    http_ = *HttpClient::Create({}, *loop_);
    BackendOptions options;
    options.name = "sim";
    options.base_urls = {sim_->url()};
    backend_ = std::make_unique<Backend>(options, *http_, metrics_);
    runner_ = std::make_unique<BackendShardRunner>(
        BackendShardRunner::Backends{{"sim", backend_.get()}}, metrics_);
  }

  static JobSpec Spec(const std::string& request_json) {
    v1::GenerateJobRequest request;
    EXPECT_TRUE(
        google::protobuf::util::JsonStringToMessage(request_json, &request)
            .ok());
    absl::StatusOr<JobSpec> spec = ValidateRequest(request, {"sim"}, {});
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *std::move(spec);
  }
  // A pipeline of two LLM steps in one stage: "ask" writes q from x,
  // "judge" writes v from q.
  static JobSpec AskAndJudge() {
    return Spec(R"({"pipeline": {"steps": [
        {"name": "ask", "llm": {"block": {"model": "m",
          "prompt_template": "{{x}}"}, "output_columns": ["q"]}},
        {"name": "judge", "llm": {"block": {"model": "m",
          "prompt_template": "Judge {{q}}"}, "output_columns": ["v"]}}]}})");
  }
  static google::protobuf::Struct Row(const std::string& x) {
    google::protobuf::Struct row;
    (*row.mutable_fields())["x"].set_string_value(x);
    return row;
  }
  static StageInput Seeds(std::vector<std::string> xs) {
    std::vector<google::protobuf::Struct> rows;
    for (const std::string& x : xs) rows.push_back(Row(x));
    return StageInput{0, SeedRows(0, std::move(rows))};
  }

  Metrics metrics_;
  std::unique_ptr<testing::SimThread> sim_;
  std::unique_ptr<EventLoop> loop_ = *EventLoop::Create();
  std::unique_ptr<HttpClient> http_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<BackendShardRunner> runner_;
  CancellationToken token_;
  Worker worker_;
};

TEST_F(ShardRunnerTest, AStageIsHandedBackOncePerLlmStepWithItsRows) {
  StartBackend();
  const JobSpec spec = AskAndJudge();
  runner_->Start(spec, ShardSpec{.index = 0, .first_row = 0, .row_count = 2},
                 Seeds({"a", "b"}), token_, worker_.Ready());

  int continued = 0;
  ShardOutcome outcome = worker_.RunToOutcome(&continued);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  // The first step's continuation sent the second step's requests.
  EXPECT_EQ(continued, 1);
  EXPECT_EQ(worker_.hand_backs(), 2);
  std::vector<std::string> verdicts;
  for (const PipelineRow& row : outcome.rows) {
    verdicts.push_back(row.columns().fields().at("v").string_value());
  }
  EXPECT_THAT(verdicts, ElementsAre("sim(0): Judge sim(0): a",
                                    "sim(0): Judge sim(0): b"));
  ASSERT_EQ(outcome.steps.size(), 2u);
  EXPECT_EQ(outcome.steps[1].step(), "judge");
  EXPECT_EQ(outcome.steps[1].rows_in(), 2);
  EXPECT_EQ(outcome.steps[1].rows_out(), 2);
  // llmsim is a vLLM: each step's two prompts went as one request.
  EXPECT_EQ(sim_->Stats()["requests"], 2);
}

// Both requests hang: Start has returned with them in flight (the test's
// thread is the only worker), and cancelling the job hands the shard back
// with the job's reason.
TEST_F(ShardRunnerTest,
       AStageWaitingOnTheBackendHoldsNoThreadAndStopsOnCancel) {
  llmsim::SimServer::Options options;
  options.fault_script = "hang,hang";
  StartBackend(options);
  const JobSpec spec = AskAndJudge();
  runner_->Start(spec, ShardSpec{.index = 0, .first_row = 0, .row_count = 2},
                 Seeds({"a", "b"}), token_, worker_.Ready());
  EXPECT_EQ(worker_.hand_backs(), 0);

  token_.Cancel(absl::CancelledError("cancelled by the test"));
  ShardOutcome outcome = worker_.RunToOutcome();
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(outcome.status.message(), HasSubstr("cancelled by the test"));
  EXPECT_TRUE(outcome.rows.empty());
  EXPECT_EQ(worker_.hand_backs(), 1);
}

TEST_F(ShardRunnerTest,
       ABlockWaitingOnTheBackendHoldsNoThreadAndStopsOnCancel) {
  llmsim::SimServer::Options options;
  options.fault_script = "hang";
  StartBackend(options);
  const JobSpec spec = Spec(R"({"block": {"model": "m",
      "prompt_template": "{{x}}"}})");
  runner_->Start(spec, ShardSpec{.index = 0, .first_row = 0, .row_count = 1},
                 BlockInput{Row("a")}, token_, worker_.Ready());
  EXPECT_EQ(worker_.hand_backs(), 0);

  token_.Cancel(absl::CancelledError("cancelled by the test"));
  ShardOutcome outcome = worker_.RunToOutcome();
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(worker_.hand_backs(), 1);
}

// A stage with no LLM step never waits: it is handed back from Start.
TEST_F(ShardRunnerTest, AStageOfColumnStepsIsHandedBackFromStart) {
  StartBackend();
  const JobSpec spec = Spec(R"({"pipeline": {"steps": [
      {"name": "copy", "duplicate_columns": {"columns_map":
        [{"from": "x", "to": "y"}]}}]}})");
  runner_->Start(spec, ShardSpec{.index = 0, .first_row = 0, .row_count = 1},
                 Seeds({"a"}), token_, worker_.Ready());
  EXPECT_EQ(worker_.hand_backs(), 1);
  ShardOutcome outcome = worker_.RunToOutcome();
  ASSERT_EQ(outcome.rows.size(), 1u);
  EXPECT_EQ(outcome.rows[0].columns().fields().at("y").string_value(), "a");
  EXPECT_EQ(sim_->Stats()["requests"], 0);
}

}  // namespace
}  // namespace sdg
