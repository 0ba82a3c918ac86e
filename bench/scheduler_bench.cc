// Scheduling overhead per shard: a job of many one-row shards on a runner
// that answers at once, so what is measured is the scheduler's own work
// (taking a shard, reading its row, reporting it, committing its event), per
// shard, in wall and CPU time, with the in-memory store (--ephemeral) and the
// durable one (SQLite and files in a temporary state_dir, fsync'd). Prints
// one JSON object per configuration.
#include <stdlib.h>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/time/clock.h"
#include "server/http/event_loop.h"
#include "server/scheduling/scheduler.h"
#include "server/store/memory_job_store.h"
#include "server/store/sqlite_job_store.h"

namespace sdg {
namespace {

class InstantRunner final : public BlockingShardRunner {
 public:
  // A pipeline stage's rows pass through.
  ShardOutcome Run(const JobSpec&, const ShardSpec&, ShardInput input,
                   CancellationToken&) override {
    ShardOutcome outcome;
    if (auto* stage = std::get_if<StageInput>(&input)) {
      outcome.rows = std::move(stage->rows);
    }
    return outcome;
  }
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

void Measure(int workers, int64_t shards, bool durable) {
  Metrics metrics;
  std::string dir = "/tmp/sdg-scheduler-bench.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) std::abort();
  std::unique_ptr<JobStore> store;
  if (durable) {
    store = *SqliteJobStore::Open(dir);
  } else {
    store = std::make_unique<MemoryJobStore>();
  }
  auto timers = *EventLoop::Create();  // the event loop sdgd uses
  InstantRunner runner;
  Scheduler::Options options;
  options.max_workers = workers;
  Scheduler scheduler(options, runner, *timers, metrics);

  JobSpec spec;
  spec.job_id = "bench";
  spec.batch_size = 1;
  spec.num_workers = workers;
  std::unique_ptr<DatasetBuilder> rows = *store->NewJobDataset(spec.job_id);
  google::protobuf::Struct row;
  (*row.mutable_fields())["question"].set_string_value("why is the sky blue?");
  for (int64_t i = 0; i < shards; ++i) (void)rows->Add(row);
  JobRecord record;
  record.job_id = spec.job_id;
  if (!store->AddJob(record).ok()) std::abort();
  auto job = *Job::Create(std::move(spec), std::move(record), *rows->Finish(),
                          *store, metrics);

  double cpu_start = CpuSeconds();
  absl::Time start = absl::Now();
  if (!scheduler.Submit(job).ok()) std::abort();
  job->AwaitFinished(absl::InfiniteFuture());
  double wall = absl::ToDoubleSeconds(absl::Now() - start);
  double cpu = CpuSeconds() - cpu_start;
  std::printf(
      "{\"bench\":\"scheduler\",\"store\":\"%s\",\"workers\":%d,"
      "\"shards\":%lld,\"wall_us_per_shard\":%.2f,"
      "\"cpu_us_per_shard\":%.2f}\n",
      durable ? "durable" : "ephemeral", workers,
      static_cast<long long>(shards), wall * 1e6 / shards, cpu * 1e6 / shards);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sdg

int main() {
  for (bool durable : {false, true}) {
    for (int workers : {1, 4, 64}) sdg::Measure(workers, 200000, durable);
  }
  return 0;
}
