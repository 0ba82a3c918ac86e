#include "server/service/job_registry.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"
#include "base/status_macros.h"

namespace sdg {
namespace {

// Jobs looked at per turn of the registry's lock while a page is filled.
constexpr size_t kListBatch = 256;

// The payload that marks StoreReadRefused.
constexpr absl::string_view kStoreReadRefused = "sdg/store-read-refused";

}  // namespace

absl::Status JobIdTaken(const std::string& job_id) {
  return absl::AlreadyExistsError(
      absl::StrCat("job_id: a job ", Quoted(job_id),
                   " already exists with a different request; choose "
                   "another id or leave job_id empty"));
}

absl::Status StoreReadRefused() {
  absl::Status refused = absl::UnavailableError(
      "answering needs a read of the job store; ask again off the reaction");
  refused.SetPayload(kStoreReadRefused, absl::Cord());
  return refused;
}

bool IsStoreReadRefused(const absl::Status& status) {
  return status.GetPayload(kStoreReadRefused).has_value();
}

absl::Status JobRegistry::Add(std::shared_ptr<Job> job) {
  Entry entry;
  entry.job_id = job->id();
  entry.tenant = job->tenant();
  entry.job = std::move(job);
  return AddEntry(std::move(entry));
}

absl::Status JobRegistry::AddEnded(const JobRecord& record) {
  Entry entry;
  entry.job_id = record.job_id;
  entry.tenant = record.tenant;
  entry.state = record.state;
  entry.end_time = record.end_time;
  return AddEntry(std::move(entry));
}

absl::Status JobRegistry::AddEntry(Entry entry) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = positions_.try_emplace(entry.job_id, next_position_);
  if (!inserted) return JobIdTaken(entry.job_id);
  entries_[next_position_++] = std::move(entry);
  return absl::OkStatus();
}

absl::Status JobRegistry::NotFound(const std::string& job_id) const {
  return absl::NotFoundError(
      absl::StrCat("no job ", Quoted(job_id), " (finished jobs are kept for ",
                   absl::FormatDuration(retention_), ")"));
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Find(
    const std::string& job_id, const Caller& caller, StoreReads reads) {
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = positions_.find(job_id);
    if (it == positions_.end()) return NotFound(job_id);
    entry = entries_.at(it->second);
  }
  if (!caller.Owns(entry.tenant) || Expired(entry, absl::Now())) {
    return NotFound(job_id);
  }
  return JobOf(entry, reads);
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::JobOf(const Entry& entry,
                                                        StoreReads reads) {
  if (entry.job != nullptr) return entry.job;
  if (reads == StoreReads::kRefused) return StoreReadRefused();
  absl::StatusOr<JobRecord> record = store_.LoadJob(entry.job_id);
  // Removed since (deleted, or past its retention).
  if (absl::IsNotFound(record.status())) return NotFound(entry.job_id);
  if (!record.ok()) return record.status();
  return Rebuild(*std::move(record));
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Rebuild(JobRecord record) {
  if (record.unfinished()) return StoredUnfinished(record.job_id);
  return load_ended_(std::move(record));
}

absl::Status JobRegistry::StoredUnfinished(const std::string& job_id) {
  return absl::InternalError(absl::StrCat(
      "the store holds job ", Quoted(job_id),
      " as unfinished, but this server ended it; restart sdgd to resume it"));
}

std::vector<std::pair<uint64_t, JobRegistry::Entry>> JobRegistry::All() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, Entry>> all(entries_.begin(), entries_.end());
  return all;
}

std::vector<std::shared_ptr<Job>> JobRegistry::Unfinished() {
  std::vector<std::shared_ptr<Job>> jobs;
  for (auto& [position, entry] : All()) {
    if (entry.job != nullptr && !entry.job->IsFinished()) {
      jobs.push_back(std::move(entry.job));
    }
  }
  return jobs;
}

void JobRegistry::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = positions_.find(job_id);
  if (it == positions_.end()) return;
  entries_.erase(it->second);
  positions_.erase(it);
}

absl::StatusOr<JobRegistry::Page> JobRegistry::ListPage(
    const Caller& caller, const std::string& page_token, int size,
    v1::JobState state, StoreReads reads) {
  uint64_t after = 0;
  if (!page_token.empty() && !absl::SimpleAtoi(page_token, &after)) {
    return absl::InvalidArgumentError(
        "page_token: not a token from ListJobs' next_page_token");
  }
  // The page is chosen from entries copied under the lock and looked at
  // after it, so that no job's mutex is taken under the registry's; then
  // its ended jobs are read from the store at once.
  std::vector<std::pair<uint64_t, Entry>> candidates;
  std::vector<Entry> chosen;
  const absl::Time now = absl::Now();
  uint64_t last_listed = after;
  Page page;
  while (page.next_page_token.empty()) {
    candidates.clear();
    {
      absl::MutexLock lock(&mu_);
      for (auto it = entries_.upper_bound(after);
           it != entries_.end() && candidates.size() < kListBatch; ++it) {
        if (caller.Owns(it->second.tenant)) candidates.push_back(*it);
        after = it->first;
      }
    }
    if (candidates.empty()) break;
    for (auto& [position, entry] : candidates) {
      if (Expired(entry, now)) continue;
      if (state != v1::JOB_STATE_UNSPECIFIED && StateOf(entry) != state) {
        continue;
      }
      if (static_cast<int>(chosen.size()) == size) {
        page.next_page_token = absl::StrCat(last_listed);
        break;
      }
      chosen.push_back(std::move(entry));
      last_listed = position;
    }
  }
  SDG_ASSIGN_OR_RETURN(page.jobs, ListedOf(chosen, reads));
  return page;
}

absl::StatusOr<std::vector<JobRegistry::Listed>> JobRegistry::ListedOf(
    const std::vector<Entry>& entries, StoreReads reads) {
  std::vector<std::string> ended;
  for (const Entry& entry : entries) {
    if (entry.job == nullptr) ended.push_back(entry.job_id);
  }
  std::vector<JobRecord> records;
  if (!ended.empty()) {
    if (reads == StoreReads::kRefused) return StoreReadRefused();
    SDG_ASSIGN_OR_RETURN(records, store_.LoadJobsById(ended));
  }
  // Records come in the entries' order; one removed since is skipped.
  auto record = records.begin();
  std::vector<Listed> listed;
  listed.reserve(entries.size());
  for (const Entry& entry : entries) {
    if (entry.job != nullptr) {
      listed.push_back({.job = entry.job, .ended = {}});
      continue;
    }
    if (record == records.end() || record->job_id != entry.job_id) continue;
    if (record->unfinished()) return StoredUnfinished(record->job_id);
    listed.push_back({.job = nullptr, .ended = std::move(*record++)});
  }
  return listed;
}

v1::JobState JobRegistry::StateOf(const Entry& entry) const {
  return entry.job != nullptr ? entry.job->state() : entry.state;
}

bool JobRegistry::Expired(const Entry& entry, absl::Time now) const {
  if (entry.job != nullptr && !entry.job->IsFinished()) return false;
  const absl::Time end =
      entry.job != nullptr ? entry.job->end_time() : entry.end_time;
  return end != absl::InfinitePast() && end <= now - retention_;
}

int JobRegistry::RemoveExpired(absl::Time now) {
  std::vector<std::pair<uint64_t, Entry>> expired = All();
  std::erase_if(expired, [&](const auto& positioned) {
    return !Expired(positioned.second, now);
  });
  for (const auto& [position, entry] : expired) {
    Remove(entry.job_id);
    if (absl::Status removed = store_.RemoveJob(entry.job_id); !removed.ok()) {
      Log(LogLevel::kWarning, "job store: cannot remove an expired job",
          {{"job_id", entry.job_id},
           {"error", std::string(removed.message())}});
    }
  }
  return static_cast<int>(expired.size());
}

int JobRegistry::ForgetEndedJobs() {
  // Which jobs to let go is decided outside the lock (each job's state is
  // under its own mutex), then each is let go if its entry still holds it.
  struct Ended {
    uint64_t position;
    std::shared_ptr<Job> job;
    v1::JobState state;
    absl::Time end_time;
  };
  std::vector<Ended> ended;
  for (auto& [position, entry] : All()) {
    if (entry.job == nullptr || !entry.job->IsStoredEnded()) continue;
    const v1::JobState state = entry.job->state();
    const absl::Time end_time = entry.job->end_time();
    ended.push_back({position, std::move(entry.job), state, end_time});
  }
  absl::MutexLock lock(&mu_);
  int forgotten = 0;
  for (const Ended& job : ended) {
    auto it = entries_.find(job.position);
    if (it == entries_.end() || it->second.job != job.job) continue;
    Entry& entry = it->second;
    entry.state = job.state;
    entry.end_time = job.end_time;
    entry.job.reset();
    ++forgotten;
  }
  return forgotten;
}

}  // namespace sdg
