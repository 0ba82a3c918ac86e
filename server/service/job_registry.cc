#include "server/service/job_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"

namespace sdg {
namespace {

// Jobs looked at per turn of the registry's lock while a page is filled.
constexpr size_t kListBatch = 256;

}  // namespace

absl::Status JobIdTaken(const std::string& job_id) {
  return absl::AlreadyExistsError(
      absl::StrCat("job_id: a job ", Quoted(job_id),
                   " already exists with a different request; choose "
                   "another id or leave job_id empty"));
}

absl::Status JobRegistry::Add(std::shared_ptr<Job> job) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = positions_.try_emplace(job->id(), next_position_);
  if (!inserted) return JobIdTaken(job->id());
  jobs_[next_position_++] = std::move(job);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Find(
    const std::string& job_id, const Caller& caller) {
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    auto it = positions_.find(job_id);
    if (it != positions_.end()) job = jobs_.at(it->second);
  }
  if (job == nullptr || !caller.Owns(job->tenant()) ||
      Expired(*job, absl::Now())) {
    return absl::NotFoundError(
        absl::StrCat("no job ", Quoted(job_id), " (finished jobs are kept for ",
                     absl::FormatDuration(retention_), ")"));
  }
  return job;
}

std::vector<std::shared_ptr<Job>> JobRegistry::All() {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Job>> jobs;
  jobs.reserve(jobs_.size());
  for (const auto& [position, job] : jobs_) jobs.push_back(job);
  return jobs;
}

std::vector<std::shared_ptr<Job>> JobRegistry::List() {
  std::vector<std::shared_ptr<Job>> jobs = All();
  const absl::Time now = absl::Now();
  std::erase_if(jobs, [&](const auto& job) { return Expired(*job, now); });
  return jobs;
}

std::vector<std::shared_ptr<Job>> JobRegistry::Unfinished() {
  std::vector<std::shared_ptr<Job>> jobs = List();
  std::erase_if(jobs, [](const auto& job) { return job->IsFinished(); });
  return jobs;
}

void JobRegistry::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = positions_.find(job_id);
  if (it == positions_.end()) return;
  jobs_.erase(it->second);
  positions_.erase(it);
}

absl::StatusOr<JobRegistry::Page> JobRegistry::ListPage(
    const Caller& caller, const std::string& page_token, int size,
    v1::JobState state) {
  uint64_t after = 0;
  if (!page_token.empty() && !absl::SimpleAtoi(page_token, &after)) {
    return absl::InvalidArgumentError(
        "page_token: not a token from ListJobs' next_page_token");
  }
  // The candidates are copied under the lock and looked at after it, so
  // that no job's mutex is taken under the registry's.
  std::vector<std::pair<uint64_t, std::shared_ptr<Job>>> candidates;
  const absl::Time now = absl::Now();
  uint64_t last_listed = after;
  Page page;
  while (true) {
    candidates.clear();
    {
      absl::MutexLock lock(&mu_);
      for (auto it = jobs_.upper_bound(after);
           it != jobs_.end() && candidates.size() < kListBatch; ++it) {
        if (caller.Owns(it->second->tenant())) candidates.push_back(*it);
        after = it->first;
      }
    }
    if (candidates.empty()) return page;
    for (const auto& [position, job] : candidates) {
      if (Expired(*job, now)) continue;
      if (state != v1::JOB_STATE_UNSPECIFIED && job->state() != state) continue;
      if (static_cast<int>(page.jobs.size()) == size) {
        page.next_page_token = absl::StrCat(last_listed);
        return page;
      }
      page.jobs.push_back(job);
      last_listed = position;
    }
  }
}

bool JobRegistry::Expired(const Job& job, absl::Time now) const {
  const absl::Time end = job.end_time();
  return end != absl::InfinitePast() && end <= now - retention_ &&
         job.IsFinished();
}

int JobRegistry::RemoveExpired(absl::Time now) {
  std::vector<std::shared_ptr<Job>> expired = All();
  std::erase_if(expired, [&](const auto& job) { return !Expired(*job, now); });
  for (const std::shared_ptr<Job>& job : expired) {
    Remove(job->id());
    if (absl::Status removed = store_.RemoveJob(job->id()); !removed.ok()) {
      Log(LogLevel::kWarning, "job store: cannot remove an expired job",
          {{"job_id", job->id()}, {"error", std::string(removed.message())}});
    }
  }
  return static_cast<int>(expired.size());
}

}  // namespace sdg
