// A job survives its server: sdgd killed (-9) or stopped (SIGTERM) at several
// points of a 20,000-row job and started again on the same store (state_dir,
// or a PostgreSQL database on the test server), while
// one `sdgctl generate` runs throughout. sdgctl exits 0, its output equals an
// uninterrupted run's row for row, and after the restart exactly the shards
// that were not committed are generated again.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/free_port.h"
#include "tests/testing/http_get.h"
#include "tests/testing/test_postgres.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

constexpr int kRows = 20000;
constexpr int kBatchSize = 8;
constexpr int kNumWorkers = 16;

// When to stop sdgd, by the rows the job has committed.
struct KillPoint {
  std::string name;
  int signal_number;
  int after_rows;          // kill once this many rows are committed
  bool torn_tail = false;  // append half a record to the log before restart
  // The last requests hang, so that the stop surely comes before the end.
  bool hang_last_requests = false;
  // The store is PostgreSQL (--store_url_file), not the state_dir.
  bool postgres = false;
  // A second sdgd already waits as a standby and takes the job over (with
  // the PostgreSQL store), instead of the stopped one being started again.
  bool standby = false;
  // The standby listens on a port of its own, and sdgctl is given both
  // addresses as one target (ipv4:A,B), as compose's two replicas are.
  bool standby_own_port = false;
};

// llmsim answers the first requests of the job and never the last four
// (2,500 requests: one per shard of 8 rows, batched): the job cannot end
// before the stop.
std::string HangTheLastRequests() {
  std::string script = "--fault_script=";
  for (int i = 0; i < kRows / kBatchSize - 4; ++i) script += "ok,";
  return script + "hang,hang,hang,hang";
}

// The shards the restarted sdgd found committed, from its "job resumed"
// line; 0 if it found none and started the job anew ("job started").
int64_t ShardsDoneAtResume(const std::string& log) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"msg\":\"job resumed\"") == std::string::npos) continue;
    return json::parse(line)["shards_done"].get<int64_t>();
  }
  return 0;
}

void PrintTo(const KillPoint& point, std::ostream* out) { *out << point.name; }

std::string Dataset() {
  std::string text;
  for (int i = 0; i < kRows; ++i) {
    text +=
        json{{"id", i}, {"q", "question " + std::to_string(i)}}.dump() + "\n";
  }
  return text;
}

std::vector<std::string> GenerateArgs(const std::string& dir,
                                      const std::string& name) {
  return {"generate",
          "--input=" + dir + "/in.jsonl",
          "--output=" + dir + "/" + name + ".jsonl",
          "--model=m",
          "--template=Q: {{q}}",
          "--job_id=" + name,
          "--batch_size=" + std::to_string(kBatchSize),
          "--num_workers=" + std::to_string(kNumWorkers)};
}

StackOptions Options() {
  StackOptions options;
  // 20 ms a reply: the job takes seconds, so the kill points are apart.
  options.llmsim_args = {"--latency_ms=20"};
  options.sdgd_port = FreeLoopbackPort();
  options.sdgd_args = {"--shutdown_grace=100ms"};
  return options;
}

class DurabilityTest : public StackTest,
                       public ::testing::WithParamInterface<KillPoint> {
 protected:
  // The uninterrupted run every interrupted one must equal.
  static void SetUpTestSuite() {
    auto stack = Stack::Start(Options());
    ASSERT_TRUE(stack.ok()) << stack.status();
    WriteFile((*stack)->dir() + "/in.jsonl", Dataset());
    CommandResult result =
        (*stack)->Sdgctl(GenerateArgs((*stack)->dir(), "reference"));
    ASSERT_EQ(result.exit_code, 0) << result.err;
    reference_ =
        new std::string(ReadFile((*stack)->dir() + "/reference.jsonl"));
  }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }

  int64_t RowsSucceeded(const std::string& job_id) {
    if (stub_ == nullptr) {
      stub_ = v1::GenerationService::NewStub(grpc::CreateChannel(
          stack_->address(), grpc::InsecureChannelCredentials()));
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::Job job;
    if (!stub_->GetJob(&context, request, &job).ok()) return -1;
    return job.rows_succeeded();
  }

  std::unique_ptr<v1::GenerationService::Stub> stub_;

  static std::string* reference_;
};

std::string* DurabilityTest::reference_ = nullptr;

TEST_P(DurabilityTest, GenerateOutlivesTheServer) {
  ASSERT_NE(reference_, nullptr);
  const KillPoint& point = GetParam();
  StackOptions options = Options();
  if (point.hang_last_requests) {
    options.llmsim_args.push_back(HangTheLastRequests());
  }
  const std::string url_file = MakeTempDir() + "/store_url";
  if (point.postgres) {
    TestPostgres& postgres = TestPostgres::Shared();
    const std::string database =
        absl::StrCat("durability_", point.standby ? "failover_" : "",
                     absl::AsciiStrToLower(point.name));
    ASSERT_TRUE(postgres.DropDatabase(database).ok());
    ASSERT_TRUE(postgres.Database(database).ok());
    WriteFile(url_file, postgres.Url(database) + "\n");
    options.sdgd_args.push_back("--store_url_file=" + url_file);
    // A killed sdgd's lease expires within a second for its successor.
    options.sdgd_args.push_back("--replica_lease=1s");
  }
  Start(options);
  if (point.standby) {
    absl::StatusOr<std::string> standby =
        stack_->StartStandby(kStandbyWaits, point.standby_own_port);
    ASSERT_TRUE(standby.ok()) << standby.status();
    if (point.standby_own_port) {
      // sdgctl below is given both replicas: after the kill, the only one
      // that listens is the standby, on its own port.
      EXPECT_THAT(stack_->address(), ::testing::StartsWith("ipv4:"));
    }
    // A standby is alive, not ready (a Service sends it nothing), and says
    // it is not the active replica.
    EXPECT_EQ(HttpGet(*standby + "/healthz").value_or("error"), "ok\n");
    EXPECT_THAT(HttpGet(*standby + "/readyz").status().message(),
                HasSubstr("HTTP 503"));
    absl::StatusOr<std::string> scrape = HttpGet(*standby + "/metrics");
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    EXPECT_EQ(MetricValue(*scrape, "sdg_replica_active"), 0);
    // Each counts the other alive through the heartbeat table.
    auto live = [](const std::string& metrics_url, const std::string& role) {
      return MetricValue(
          HttpGet(metrics_url).value_or(""),
          absl::StrCat("sdg_replicas_live{role=\"", role, "\"}"));
    };
    EXPECT_TRUE(Eventually([&] {
      return live(*standby + "/metrics", "active") == 1 &&
             live(*standby + "/metrics", "standby") == 1 &&
             live(stack_->metrics_url(), "standby") == 1;
    }));
  }
  WriteFile(stack_->dir() + "/in.jsonl", Dataset());
  auto client = stack_->StartSdgctl(GenerateArgs(stack_->dir(), "job"),
                                    stack_->dir() + "/job.stderr");
  ASSERT_TRUE(client.ok()) << client.status();

  ASSERT_TRUE(
      Eventually([&] { return RowsSucceeded("job") >= point.after_rows; },
                 absl::Seconds(120)))
      << ReadFile(stack_->dir() + "/job.stderr");
  // What llmsim generated for the stopped sdgd: read once the requests it
  // had in flight are answered or dropped, before the new sdgd sends any.
  int64_t prompts_before_restart = -1;
  auto while_stopped = [&] {
    if (point.torn_tail) {
      std::ofstream log(stack_->state_dir() + "/jobs/job/events.log",
                        std::ios::app | std::ios::binary);
      log << std::string("\x40\x00\x00\x00\x12\x34", 6);
    }
    json stats;
    if (Eventually(
            [&] {
              stats = json::parse(stack_->LlmsimStats());
              return stats["in_flight"].get<int64_t>() == 0;
            },
            absl::Seconds(60))) {
      prompts_before_restart = stats["prompts"].get<int64_t>();
    }
  };
  absl::StatusOr<int> old_status =
      point.standby
          ? stack_->FailOverToStandby(point.signal_number, while_stopped)
          : stack_->RestartSdgd(point.signal_number, while_stopped);
  ASSERT_TRUE(old_status.ok()) << old_status.status();
  if (point.signal_number == SIGTERM) {
    EXPECT_EQ(*old_status, 0) << "a SIGTERM'd sdgd exits 0";
  }
  const bool frozen = point.signal_number == SIGSTOP;
  if (frozen) {
    // Woken after the standby took over, it found its lease gone and
    // stopped; every write it tried was fenced out (the output below has
    // each row once).
    EXPECT_EQ(*old_status, 1) << "a fenced-out sdgd exits 1";
    EXPECT_THAT(stack_->SdgdLog(), HasSubstr("\"msg\":\"replica lease lost\""));
  }

  EXPECT_EQ((*client)->Wait(), 0) << ReadFile(stack_->dir() + "/job.stderr");
  const std::string stderr_text = ReadFile(stack_->dir() + "/job.stderr");
  EXPECT_THAT(stderr_text,
              HasSubstr("JOB_STATE_SUCCEEDED: 20000/20000 rows generated"));
  // The job's tokens are its committed shards', each once: those of shards
  // run again after the stop are not counted twice. ("Q: question N" is 3
  // tokens, its echo "sim(0): Q: question N" 4.)
  EXPECT_THAT(stderr_text,
              HasSubstr(absl::StrCat("tokens: ", kRows * 3, " prompt + ",
                                     kRows * 4, " completion")));
  // Row for row what the uninterrupted run wrote.
  EXPECT_TRUE(ReadFile(stack_->dir() + "/job.jsonl") == *reference_)
      << "the output differs from the uninterrupted run's";
  EXPECT_EQ(ReadFile(stack_->dir() + "/job.jsonl.errors.jsonl"), "");
  if (point.standby) {
    absl::StatusOr<std::string> scrape = HttpGet(stack_->metrics_url());
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    EXPECT_EQ(MetricValue(*scrape, "sdg_replica_active"), 1);
  }

  const std::string log = stack_->SdgdLog();
  // ("job resuming": also when the stop came before `started` was
  // committed, and the resumed job starts from scratch.)
  EXPECT_THAT(log, HasSubstr("\"msg\":\"job resuming\""));
  if (point.torn_tail) {
    EXPECT_THAT(log, HasSubstr("cut a torn tail"));
  }

  // Committed shards ran once: after the restart llmsim generated the rows
  // of the shards the new sdgd found uncommitted, and no others. (Shards
  // answered but not yet committed at the stop run again; how many depends
  // on the timing, so only their sum is fixed.)
  ASSERT_GE(prompts_before_restart, 0) << "llmsim never went idle";
  const int64_t shards_done = ShardsDoneAtResume(stack_->SdgdLog());
  json stats = json::parse(stack_->LlmsimStats());
  const int64_t prompts_after =
      stats["prompts"].get<int64_t>() - prompts_before_restart;
  // A frozen replica, woken, may send requests before it learns that its
  // lease is gone (requests are at least once; rows are exactly once).
  if (frozen) {
    EXPECT_GE(prompts_after, kRows - shards_done * kBatchSize);
  } else {
    EXPECT_EQ(prompts_after, kRows - shards_done * kBatchSize)
        << "shards committed at the restart: " << shards_done
        << "; prompts before it: " << prompts_before_restart;
  }
}

INSTANTIATE_TEST_SUITE_P(
    KillPoints, DurabilityTest,
    ::testing::Values(KillPoint{"KillBeforeTheFirstCommit", SIGKILL, 0},
                      KillPoint{"KillMidJob", SIGKILL, kRows / 2},
                      KillPoint{"KillDuringTheLastShards", SIGKILL,
                                kRows - 4 * kBatchSize, false, true},
                      KillPoint{"KillWithATornTail", SIGKILL, kRows / 3, true},
                      KillPoint{"SigtermMidJob", SIGTERM, kRows / 2}),
    [](const auto& info) { return info.param.name; });

// The same on the PostgreSQL store (no torn tail: its log is rows).
INSTANTIATE_TEST_SUITE_P(
    PostgresKillPoints, DurabilityTest,
    ::testing::Values(
        KillPoint{"KillBeforeTheFirstCommit", SIGKILL, 0, false, false, true},
        KillPoint{"KillMidJob", SIGKILL, kRows / 2, false, false, true},
        KillPoint{"KillDuringTheLastShards", SIGKILL, kRows - 4 * kBatchSize,
                  false, true, true},
        KillPoint{"SigtermMidJob", SIGTERM, kRows / 2, false, false, true}),
    [](const auto& info) { return info.param.name; });

// Two replicas on one PostgreSQL store: the standby takes the job over when
// the active one is killed (its lease expires), stopped (it releases it) or
// frozen (its lease expires; woken, it is fenced out and exits).
INSTANTIATE_TEST_SUITE_P(
    PostgresFailOver, DurabilityTest,
    ::testing::Values(KillPoint{"KillMidJob", SIGKILL, kRows / 2, false, false,
                                true, true},
                      KillPoint{"SigtermMidJob", SIGTERM, kRows / 2, false,
                                false, true, true},
                      // Frozen (or cut off) past its 1 s lease: the standby
                      // takes over, and the old replica, woken, is fenced.
                      KillPoint{"FreezePastTheLease", SIGSTOP, kRows / 2, false,
                                false, true, true},
                      // The standby on its own port: sdgctl, given both,
                      // reconnects to the one that listens now.
                      KillPoint{"KillMidJobWithTheStandbyOnItsOwnPort", SIGKILL,
                                kRows / 2, false, false, true, true, true}),
    [](const auto& info) { return info.param.name; });

TEST(StateDirTest, AStateDirThatCannotBeUsedStopsTheStartAndIsNamed) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/not-a-dir", "x");
  CommandResult result = RunCommand(
      {SDGD_PATH, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
       "--backend=sim=http://127.0.0.1:1/v1",
       "--state_dir=" + dir + "/not-a-dir/state"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr(dir + "/not-a-dir"));
  EXPECT_THAT(result.err, HasSubstr("Not a directory"));
}

}  // namespace
}  // namespace sdg::testing
