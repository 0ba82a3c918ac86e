#include "server/api/job_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sdg {

absl::Status JobRegistry::Add(std::shared_ptr<Job> job) {
  absl::MutexLock lock(&mu_);
  PruneLocked();
  std::string id = job->id();
  auto [it, inserted] = jobs_.try_emplace(id, Listed{next_sequence_, job});
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("job_id: a job \"", id,
                     "\" already exists; choose another id or "
                     "leave job_id empty"));
  }
  ++next_sequence_;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Find(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  PruneLocked();
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no job \"", job_id, "\" (finished jobs are kept for ",
                     absl::FormatDuration(retention_), ")"));
  }
  return it->second.job;
}

std::vector<std::shared_ptr<Job>> JobRegistry::List() {
  std::vector<Listed> listed;
  {
    absl::MutexLock lock(&mu_);
    PruneLocked();
    for (const auto& [id, entry] : jobs_) listed.push_back(entry);
  }
  std::sort(listed.begin(), listed.end(), [](const Listed& a, const Listed& b) {
    return a.sequence < b.sequence;
  });
  std::vector<std::shared_ptr<Job>> jobs;
  for (Listed& entry : listed) jobs.push_back(std::move(entry.job));
  return jobs;
}

std::vector<std::shared_ptr<Job>> JobRegistry::Unfinished() {
  std::vector<std::shared_ptr<Job>> jobs = List();
  std::erase_if(jobs, [](const auto& job) { return job->IsFinished(); });
  return jobs;
}

void JobRegistry::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

void JobRegistry::PruneLocked() {
  absl::Time cutoff = absl::Now() - retention_;
  absl::erase_if(jobs_, [cutoff](const auto& entry) {
    absl::Time end = entry.second.job->end_time();
    return end != absl::InfinitePast() && end <= cutoff;
  });
}

}  // namespace sdg
