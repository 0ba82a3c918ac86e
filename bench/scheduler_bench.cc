// Scheduling overhead per shard: a job of many one-row shards on a runner
// that answers at once, so what is measured is the scheduler's own work
// (taking a shard, reporting it, emitting its event), per shard, in wall and
// CPU time. Prints one JSON object per configuration.
#include <sys/resource.h>

#include <cstdio>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/http/http_client.h"
#include "server/scheduling/scheduler.h"

namespace sdg {
namespace {

class InstantRunner final : public ShardRunner {
 public:
  ShardOutcome Run(const JobSpec&, const ShardSpec&,
                   CancellationToken&) override {
    return {};
  }
};

class CountingSink final : public JobSink {
 public:
  void Emit(v1::JobEvent) override {}
  void Close() override { closed_.Notify(); }
  void AwaitClosed() { closed_.WaitForNotification(); }

 private:
  absl::Notification closed_;
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

void Measure(int workers, int64_t shards) {
  Metrics metrics;
  auto timers = *HttpClient::Create({});  // the event loop sdgd uses
  InstantRunner runner;
  Scheduler::Options options;
  options.max_workers = workers;
  Scheduler scheduler(options, runner, *timers, metrics);

  JobSpec spec;
  spec.job_id = "bench";
  spec.rows.resize(shards);
  spec.batch_size = 1;
  spec.num_workers = workers;
  auto sink = std::make_shared<CountingSink>();
  auto job = std::make_shared<Job>(std::move(spec), sink, metrics);

  double cpu_start = CpuSeconds();
  absl::Time start = absl::Now();
  if (!scheduler.Submit(job).ok()) std::abort();
  sink->AwaitClosed();
  double wall = absl::ToDoubleSeconds(absl::Now() - start);
  double cpu = CpuSeconds() - cpu_start;
  std::printf(
      "{\"bench\":\"scheduler\",\"workers\":%d,\"shards\":%lld,"
      "\"wall_us_per_shard\":%.2f,\"cpu_us_per_shard\":%.2f}\n",
      workers, static_cast<long long>(shards), wall * 1e6 / shards,
      cpu * 1e6 / shards);
}

}  // namespace
}  // namespace sdg

int main() {
  for (int workers : {1, 4, 64}) sdg::Measure(workers, 200000);
  return 0;
}
