// The disk under --state_dir fills mid-job, as an operator meets it: sdgd
// is given a file-size limit (what a full disk looks like to a write: the
// commit fails part way), then the limit is lifted. The job pauses instead
// of being suspended, sdgd says so (/readyz 503, sdg_store_up 0, a log
// line), and once there is room it goes on by itself: sdgctl, which kept
// following, ends with every row once, in input order. The same for the
// PostgreSQL store when its server stops mid-job and starts again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_get.h"
#include "tests/testing/test_postgres.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

constexpr int kRows = 2000;

// Sets the soft file-size limit of process `pid`.
void SetFileSizeLimit(pid_t pid, rlim_t bytes) {
  rlimit limit{};
  ASSERT_EQ(::prlimit(pid, RLIMIT_FSIZE, nullptr, &limit), 0);
  limit.rlim_cur = bytes;
  ASSERT_EQ(::prlimit(pid, RLIMIT_FSIZE, &limit, nullptr), 0);
}

class StoreOutageTest : public StackTest {
 protected:
  std::string Probe(const std::string& path) {
    return absl::StrReplaceAll(stack_->metrics_url(), {{"/metrics", path}});
  }
  // Every row once, in input order, and no errors.
  void ExpectEveryRowOnce() {
    std::istringstream output(ReadFile(stack_->dir() + "/out.jsonl"));
    int lines = 0;
    for (std::string line; std::getline(output, line); ++lines) {
      ASSERT_EQ(json::parse(line)["id"].get<int>(), lines) << line;
    }
    EXPECT_EQ(lines, kRows);
    EXPECT_EQ(
        ReadFile(stack_->dir() + "/out.jsonl.errors.jsonl").substr(0, 600), "");
  }
  void WriteInput() {
    std::string text;
    for (int i = 0; i < kRows; ++i) {
      text +=
          json{{"id", i}, {"q", "question " + std::to_string(i)}}.dump() + "\n";
    }
    WriteFile(stack_->dir() + "/in.jsonl", text);
  }
  bool NotReady() {
    absl::StatusOr<std::string> ready = HttpGet(Probe("/readyz"));
    return !ready.ok() &&
           absl::StrContains(ready.status().message(), "HTTP 503");
  }
  bool StoreUpIs(int value) {
    absl::StatusOr<std::string> scrape = HttpGet(stack_->metrics_url());
    return scrape.ok() && absl::StrContains(*scrape, "\nsdg_store_up " +
                                                         std::to_string(value));
  }
};

TEST_F(StoreOutageTest, AJobPausesWhileTheDiskIsFullAndGoesOnWhenThereIsRoom) {
  StackOptions options;
  options.llmsim_args = {"--latency_ms=1"};
  Start(options);
  WriteInput();
  // Room for the database and the job's copy of its dataset (about 60 kB),
  // not for all of its results (about 3 kB a shard of 8 rows).
  SetFileSizeLimit(stack_->sdgd().pid(), 256 << 10);

  auto client = stack_->StartSdgctl(
      {"generate", "--input=" + stack_->dir() + "/in.jsonl",
       "--output=" + stack_->dir() + "/out.jsonl", "--model=m",
       // A long prompt, so a long reply: the results outgrow the dataset.
       "--template=Q: {{q}} " + std::string(400, 'x'), "--job_id=full"},
      stack_->dir() + "/sdgctl.stderr");
  ASSERT_TRUE(client.ok()) << client.status();

  // The disk is full: the job pauses, and sdgd is not ready meanwhile.
  ASSERT_TRUE(Eventually([&] { return NotReady(); }));
  EXPECT_TRUE(StoreUpIs(0));
  EXPECT_THAT(stack_->SdgdLog(), HasSubstr("event log: cannot commit"));
  EXPECT_THAT(stack_->SdgdLog(), ::testing::Not(HasSubstr("job suspended")));

  SetFileSizeLimit(stack_->sdgd().pid(), RLIM_INFINITY);  // room again
  EXPECT_EQ((*client)->Wait(), 0) << ReadFile(stack_->dir() + "/sdgctl.stderr");
  EXPECT_TRUE(Eventually([&] { return StoreUpIs(1); }));
  EXPECT_EQ(HttpGet(Probe("/readyz")).value_or("error"), "ready\n");
  EXPECT_THAT(stack_->SdgdLog(), HasSubstr("event log: committing again"));
  ExpectEveryRowOnce();
}

TEST_F(StoreOutageTest, AJobPausesWhileTheDatabaseIsDownAndGoesOnWhenItIsBack) {
  // A server of this test's own: it stops mid-job.
  auto postgres = TestPostgres::StartPrivate();
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  ASSERT_TRUE((*postgres)->Database("outage").ok());
  const std::string url_file = MakeTempDir() + "/store_url";
  WriteFile(url_file, (*postgres)->Url("outage") + "\n");
  StackOptions options;
  // 20 ms a reply: the job is still running when the database stops.
  options.llmsim_args = {"--latency_ms=20"};
  options.sdgd_args = {"--store_url_file=" + url_file};
  Start(options);
  WriteInput();
  auto client = stack_->StartSdgctl(
      {"generate", "--input=" + stack_->dir() + "/in.jsonl",
       "--output=" + stack_->dir() + "/out.jsonl", "--model=m",
       "--template=Q: {{q}}", "--job_id=outage", "--batch_size=8"},
      stack_->dir() + "/sdgctl.stderr");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(Eventually([&] {
    return absl::StrContains(ReadFile(stack_->dir() + "/sdgctl.stderr"),
                             "progress: ");
  }));

  ASSERT_TRUE((*postgres)->Pause().ok());  // pg_ctl stop -m fast
  // The job pauses: sdgd is not ready and says why.
  ASSERT_TRUE(Eventually([&] { return NotReady(); })) << stack_->SdgdLog();
  EXPECT_TRUE(StoreUpIs(0));
  EXPECT_THAT(stack_->SdgdLog(),
              HasSubstr("PostgreSQL event log: cannot commit"));

  ASSERT_TRUE((*postgres)->Resume().ok());
  EXPECT_EQ((*client)->Wait(), 0)
      << ReadFile(stack_->dir() + "/sdgctl.stderr") << stack_->SdgdLog();
  EXPECT_TRUE(Eventually([&] { return StoreUpIs(1); }));
  EXPECT_THAT(stack_->SdgdLog(),
              HasSubstr("PostgreSQL event log: committing again"));
  EXPECT_THAT(stack_->SdgdLog(), ::testing::Not(HasSubstr("job suspended")));
  ExpectEveryRowOnce();
}

// A replica started while its database is down, and a standby that loses
// it, wait for it instead of exiting (a crash loop on Kubernetes, which
// backs off for minutes): alive, not ready, saying why, and back to
// waiting for the replica lease once the database answers.
TEST_F(StoreOutageTest, AReplicaWaitsForItsDatabaseInsteadOfExiting) {
  auto postgres = TestPostgres::StartPrivate();
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  ASSERT_TRUE((*postgres)->Database("waiting").ok());
  const std::string url_file = MakeTempDir() + "/store_url";
  WriteFile(url_file, (*postgres)->Url("waiting") + "\n");
  StackOptions options;
  // The active replica keeps its lease across the pauses below.
  options.sdgd_args = {"--store_url_file=" + url_file, "--replica_lease=60s"};
  Start(options);

  ASSERT_TRUE((*postgres)->Pause().ok());
  absl::StatusOr<std::string> second =
      stack_->StartStandby("\"msg\":\"waiting for PostgreSQL");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(HttpGet(*second + "/healthz").value_or("error"), "ok\n");
  EXPECT_THAT(HttpGet(*second + "/readyz").status().message(),
              HasSubstr("HTTP 503"));
  ASSERT_TRUE((*postgres)->Resume().ok());
  ASSERT_TRUE(stack_
                  ->AwaitInLastLog("\"msg\":\"standby: another replica",
                                   "the second sdgd never became a standby")
                  .ok());

  // Lost while it waits as a standby: it waits for the database again.
  auto count = [&](const char* text) {
    const std::string log = stack_->SdgdLog();
    int found = 0;
    for (size_t at = log.find(text); at != std::string::npos;
         at = log.find(text, at + 1)) {
      ++found;
    }
    return found;
  };
  ASSERT_TRUE((*postgres)->Pause().ok());
  ASSERT_TRUE(Eventually([&] {
    return count("\"msg\":\"waiting for PostgreSQL") >= 2;
  })) << stack_->SdgdLog();
  ASSERT_TRUE((*postgres)->Resume().ok());
  ASSERT_TRUE(Eventually([&] {
    return count("\"msg\":\"standby: another replica") >= 2;
  })) << stack_->SdgdLog();
  EXPECT_EQ(HttpGet(*second + "/healthz").value_or("error"), "ok\n");
}

}  // namespace
}  // namespace sdg::testing
