#include "server/api/job_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"

namespace sdg {

absl::Status JobIdTaken(const std::string& job_id) {
  return absl::AlreadyExistsError(
      absl::StrCat("job_id: a job ", Quoted(job_id),
                   " already exists with a different request; choose "
                   "another id or leave job_id empty"));
}

absl::Status JobRegistry::Add(std::shared_ptr<Job> job) {
  absl::MutexLock lock(&mu_);
  PruneLocked();
  auto [it, inserted] = positions_.try_emplace(job->id(), next_position_);
  if (!inserted) return JobIdTaken(job->id());
  jobs_[next_position_++] = std::move(job);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Find(
    const std::string& job_id, const Caller& caller) {
  absl::MutexLock lock(&mu_);
  PruneLocked();
  auto it = positions_.find(job_id);
  if (it == positions_.end() || !caller.Owns(jobs_.at(it->second)->tenant())) {
    return absl::NotFoundError(
        absl::StrCat("no job ", Quoted(job_id), " (finished jobs are kept for ",
                     absl::FormatDuration(retention_), ")"));
  }
  return jobs_.at(it->second);
}

std::vector<std::shared_ptr<Job>> JobRegistry::List() {
  absl::MutexLock lock(&mu_);
  PruneLocked();
  std::vector<std::shared_ptr<Job>> jobs;
  jobs.reserve(jobs_.size());
  for (const auto& [position, job] : jobs_) jobs.push_back(job);
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
  absl::MutexLock lock(&mu_);
  PruneLocked();
  Page page;
  for (auto it = jobs_.upper_bound(after); it != jobs_.end(); ++it) {
    if (!caller.Owns(it->second->tenant())) continue;
    if (state != v1::JOB_STATE_UNSPECIFIED &&
        it->second->Snapshot().state() != state) {
      continue;
    }
    if (static_cast<int>(page.jobs.size()) == size) {
      page.next_page_token = absl::StrCat(std::prev(it)->first);
      break;
    }
    page.jobs.push_back(it->second);
  }
  return page;
}

void JobRegistry::PruneLocked() {
  const absl::Time cutoff = absl::Now() - retention_;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& job = *it->second;
    const absl::Time end = job.end_time();
    if (end == absl::InfinitePast() || end > cutoff || !job.IsFinished()) {
      ++it;
      continue;
    }
    if (absl::Status removed = store_.RemoveJob(job.id()); !removed.ok()) {
      Log(LogLevel::kWarning, "job store: cannot remove an expired job",
          {{"job_id", job.id()}, {"error", std::string(removed.message())}});
    }
    positions_.erase(job.id());
    it = jobs_.erase(it);
  }
}

}  // namespace sdg
