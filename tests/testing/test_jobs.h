// Jobs for unit tests: a job on an in-memory store, and its events read back
// from its log as a watcher would.
#ifndef SDG_TESTS_TESTING_TEST_JOBS_H_
#define SDG_TESTS_TESTING_TEST_JOBS_H_

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/jobs/job.h"
#include "server/store/memory_job_store.h"

namespace sdg::testing {

// A job whose dataset holds `rows` rows (empty objects), made by `tenant`,
// its record added to `store`.
inline std::shared_ptr<Job> MakeTestJob(JobSpec spec, int64_t rows,
                                        JobStore& store, Metrics& metrics,
                                        const std::string& tenant = "") {
  std::unique_ptr<DatasetBuilder> builder = DatasetBuilder::InMemory();
  for (int64_t i = 0; i < rows; ++i) (void)builder->Add({});
  std::shared_ptr<Dataset> dataset = *builder->Finish();
  JobRecord record;
  record.job_id = spec.job_id;
  record.tenant = tenant;
  record.create_time = absl::Now();
  // Stored as the service stores a job it admits, so that its updates land.
  // A test that makes a second job with a taken id (to see it refused)
  // finds the first one's record there.
  const absl::Status added = store.AddJob(record);
  EXPECT_TRUE(added.ok() || absl::IsAlreadyExists(added)) << added;
  record.version = 1;  // as AddJob stored it
  return *Job::Create(std::move(spec), std::move(record), std::move(dataset),
                      store, metrics);
}

// Every event the job's log has committed so far.
inline std::vector<LogEvent> EventsOf(const Job& job) {
  std::vector<LogEvent> events;
  auto reader = job.log()->Read(0);
  if (!reader.ok()) return events;
  while (true) {
    auto next = (*reader)->Next();
    if (!next.ok() || !next->has_value()) break;
    if (!events.emplace_back().ParseFromString((*next)->bytes)) {
      ADD_FAILURE() << "event " << (*next)->sequence << " does not parse";
    }
  }
  return events;
}

// A job's events as a test sees them: all so far, or all once it ended.
class JobEvents {
 public:
  void Watch(std::shared_ptr<Job> job) { job_ = std::move(job); }
  std::vector<LogEvent> events() const { return EventsOf(*job_); }
  std::vector<LogEvent> AwaitClosed() const {
    job_->AwaitFinished(absl::InfiniteFuture());
    return EventsOf(*job_);
  }

 private:
  std::shared_ptr<Job> job_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_TEST_JOBS_H_
