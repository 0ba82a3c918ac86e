// What an operator's Prometheus sees, checked against the real tools from
// Debian's prometheus package: promtool lints a scrape taken mid-job, a real
// Prometheus server scrapes sdgd and answers a query, and every metric the
// dashboard and the alert rules use is one sdgd exports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/free_port.h"
#include "tests/testing/http_get.h"

namespace sdg::testing {
namespace {

// Every word that starts with sdg_ (sdg_[a-z0-9_]+ at a word's start).
std::vector<std::string> MetricNames(absl::string_view text) {
  auto word = [](char c) { return absl::ascii_isalnum(c) || c == '_'; };
  auto name_char = [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
  };
  std::vector<std::string> names;
  for (size_t at = text.find("sdg_"); at != absl::string_view::npos;
       at = text.find("sdg_", at + 1)) {
    if (at > 0 && word(text[at - 1])) continue;
    size_t end = at + 4;
    while (end < text.size() && name_char(text[end])) ++end;
    if (end > at + 4) names.emplace_back(text.substr(at, end - at));
  }
  return names;
}

using ::testing::HasSubstr;

class MetricsOpsTest : public StackTest {
 protected:
  std::string Dataset(int rows) {
    std::string path = stack_->dir() + "/in.jsonl";
    std::string text;
    for (int i = 0; i < rows; ++i) {
      text +=
          nlohmann::json{{"q", "question " + std::to_string(i)}}.dump() + "\n";
    }
    WriteFile(path, text);
    return path;
  }

  std::vector<std::string> GenerateArgs(int rows) {
    return {"generate",
            "--input=" + Dataset(rows),
            "--output=" + stack_->dir() + "/out.jsonl",
            "--model=m",
            "--template={{q}}",
            "--batch_size=2"};
  }
};

TEST_F(MetricsOpsTest, ScrapeTakenWhileAJobRunsPassesPromtool) {
  StackOptions options;
  options.llmsim_args = {"--latency_ms=600000"};
  Start(options);
  auto client =
      stack_->StartSdgctl(GenerateArgs(6), stack_->dir() + "/client.err");
  ASSERT_TRUE(client.ok()) << client.status();
  std::string scrape;
  ASSERT_TRUE(Eventually([&] {
    auto body = HttpGet(stack_->metrics_url());
    if (!body.ok()) return false;
    scrape = *body;
    return MetricValue(scrape, "sdg_jobs_active") == 1 &&
           // vLLM-style llmsim: one request per shard of 2 rows.
           MetricValue(scrape, R"(sdg_backend_in_flight{backend="sim"})") == 3;
  }));
  std::string path = stack_->dir() + "/scrape.txt";
  WriteFile(path, scrape);
  CommandResult lint =
      RunCommand({"/bin/sh", "-c", "promtool check metrics < " + path});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err << "\n" << scrape;
  EXPECT_EQ(lint.out + lint.err, "");  // no lint findings either
  (*client)->Signal(SIGINT);
  EXPECT_EQ((*client)->Wait(), 1);
}

TEST_F(MetricsOpsTest, PrometheusScrapesRowsTotal) {
  Start();
  int port = FreeLoopbackPort();
  std::string config = stack_->dir() + "/prometheus.yml";
  std::string metrics = stack_->metrics_url();
  std::string target = metrics.substr(std::string("http://").size());
  target = target.substr(0, target.find('/'));
  WriteFile(config, absl::StrCat("global:\n  scrape_interval: 1s\n",
                                 "scrape_configs:\n  - job_name: sdgd\n",
                                 "    static_configs:\n      - targets: ['",
                                 target, "']\n"));
  auto prometheus =
      Subprocess::Start({"/usr/bin/prometheus", "--config.file=" + config,
                         "--storage.tsdb.path=" + stack_->dir() + "/tsdb",
                         absl::StrCat("--web.listen-address=127.0.0.1:", port)},
                        stack_->dir() + "/prometheus.log");
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();

  CommandResult job = stack_->Sdgctl(GenerateArgs(7));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  std::string url = absl::StrCat(
      "http://127.0.0.1:", port,
      "/api/v1/query?query=sdg_rows_total%7Boutcome%3D%22succeeded%22%7D");
  std::string last;
  EXPECT_TRUE(Eventually([&] {
    auto body = HttpGet(url);
    if (!body.ok()) return false;
    last = *body;
    auto reply = nlohmann::json::parse(last, nullptr, false);
    if (reply.is_discarded() || reply["data"]["result"].empty()) return false;
    // [timestamp, "value"]
    return reply["data"]["result"][0]["value"][1] == "7";
  })) << last
      << "\n"
      << ReadFile(stack_->dir() + "/prometheus.log");
  (*prometheus)->Signal(SIGTERM);
  EXPECT_EQ((*prometheus)->Wait(), 0);
}

// Every sdg_* name in the dashboard and the rules must be exported from the
// first scrape, before any job: a panel that queries a name nobody exports
// yet shows "No data", and a rate() alert cannot fire on a fresh pod.
TEST_F(MetricsOpsTest, DashboardAndRulesQueryOnlyMetricsExportedFromTheStart) {
  Start({});
  auto scrape = HttpGet(stack_->metrics_url());
  ASSERT_TRUE(scrape.ok());
  std::set<std::string> exported;
  for (absl::string_view line : absl::StrSplit(*scrape, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    exported.insert(std::string(line.substr(0, line.find_first_of("{ "))));
  }
  ASSERT_GT(exported.size(), 20u);

  for (const char* file :
       {"deploy/grafana/sdgd.json", "deploy/prometheus/rules.yaml"}) {
    std::string text = ReadFile(std::string(SDG_SOURCE_DIR) + "/" + file);
    ASSERT_FALSE(text.empty()) << file;
    int used = 0;
    for (const std::string& name : MetricNames(text)) {
      ++used;
      EXPECT_TRUE(exported.contains(name))
          << file << " uses " << name << ", which sdgd does not export";
    }
    EXPECT_GT(used, 5) << file;
  }
}

}  // namespace
}  // namespace sdg::testing
