#include "server/store/memory_job_store.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "server/store/memory_event_log.h"

namespace sdg {

class MemoryJobStore::Builder final : public DatasetBuilder {
 public:
  using OnFinish = std::function<void(std::shared_ptr<Dataset>)>;
  explicit Builder(OnFinish on_finish)
      : inner_(DatasetBuilder::InMemory()), on_finish_(std::move(on_finish)) {}
  absl::Status Add(const google::protobuf::Struct& row) override {
    info_.Add(row);
    return inner_->Add(row);
  }
  absl::StatusOr<std::shared_ptr<Dataset>> Finish() override {
    absl::StatusOr<std::shared_ptr<Dataset>> dataset = inner_->Finish();
    if (dataset.ok()) on_finish_(*dataset);
    return dataset;
  }

 private:
  std::unique_ptr<DatasetBuilder> inner_;
  OnFinish on_finish_;
};

absl::StatusOr<std::unique_ptr<DatasetBuilder>> MemoryJobStore::NewJobDataset(
    const std::string& job_id) {
  return std::make_unique<Builder>([this, job_id](std::shared_ptr<Dataset> d) {
    absl::MutexLock lock(&mu_);
    job_datasets_[job_id] = std::move(d);
  });
}

absl::StatusOr<std::shared_ptr<Dataset>> MemoryJobStore::UseUploadedDataset(
    const std::string& dataset_id, const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = upload_datasets_.find(dataset_id);
  if (it == upload_datasets_.end()) return NoSuchUpload(dataset_id);
  job_datasets_[job_id] = it->second;
  return it->second;
}

absl::StatusOr<std::shared_ptr<Dataset>> MemoryJobStore::OpenUpload(
    const std::string& dataset_id) {
  absl::MutexLock lock(&mu_);
  auto it = upload_datasets_.find(dataset_id);
  if (it == upload_datasets_.end()) return NoSuchUpload(dataset_id);
  return it->second;
}

void MemoryJobStore::DiscardJobDataset(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  job_datasets_.erase(job_id);
}

absl::StatusOr<std::shared_ptr<Dataset>> MemoryJobStore::OpenJobDataset(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = job_datasets_.find(job_id);
  if (it == job_datasets_.end()) return NoJobDataset(job_id);
  return it->second;
}

absl::StatusOr<std::unique_ptr<DatasetBuilder>> MemoryJobStore::NewUpload(
    const std::string& dataset_id) {
  return std::make_unique<Builder>(
      [this, dataset_id](std::shared_ptr<Dataset> d) {
        absl::MutexLock lock(&mu_);
        upload_datasets_[dataset_id] = std::move(d);
      });
}

absl::Status MemoryJobStore::SaveUpload(const StoredDataset& dataset) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] =
      uploads_.try_emplace(dataset.dataset.dataset_id(), dataset);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("dataset_id: ", Quoted(dataset.dataset.dataset_id()),
                     " already exists"));
  }
  return absl::OkStatus();
}

void MemoryJobStore::DiscardUpload(const std::string& dataset_id) {
  absl::MutexLock lock(&mu_);
  upload_datasets_.erase(dataset_id);
}

absl::StatusOr<StoredDataset> MemoryJobStore::FindUpload(
    const std::string& dataset_id) {
  absl::MutexLock lock(&mu_);
  auto it = uploads_.find(dataset_id);
  if (it == uploads_.end()) {
    return NoSuchUpload(dataset_id);
  }
  return it->second;
}

absl::StatusOr<int> MemoryJobStore::PruneUploads(absl::Time cutoff) {
  absl::MutexLock lock(&mu_);
  int pruned = 0;
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    if (it->second.create_time < cutoff ||
        it->second.expire_time < absl::Now()) {
      upload_datasets_.erase(it->first);
      uploads_.erase(it++);
      ++pruned;
    } else {
      ++it;
    }
  }
  return pruned;
}

absl::StatusOr<std::vector<StoredDataset>> MemoryJobStore::ListUploads(
    const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  std::vector<StoredDataset> listed;
  for (const auto& [id, upload] : uploads_) {
    if (upload.tenant == tenant) listed.push_back(upload);
  }
  std::sort(listed.begin(), listed.end(),
            [](const StoredDataset& a, const StoredDataset& b) {
              return std::tie(a.create_time, a.dataset.dataset_id()) <
                     std::tie(b.create_time, b.dataset.dataset_id());
            });
  return listed;
}

absl::Status MemoryJobStore::RemoveUpload(const std::string& dataset_id) {
  absl::MutexLock lock(&mu_);
  if (uploads_.erase(dataset_id) == 0) return NoSuchUpload(dataset_id);
  upload_datasets_.erase(dataset_id);
  return absl::OkStatus();
}

absl::Status MemoryJobStore::AddJob(const JobRecord& record) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = records_.try_emplace(record.job_id);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("the store holds job ", Quoted(record.job_id)));
  }
  it->second = NumberedRecord{++jobs_added_, record};
  it->second.record.version = 1;
  return absl::OkStatus();
}

absl::Status MemoryJobStore::UpdateJob(const JobRecord& record) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(record.job_id);
  if (it == records_.end()) return NoSuchJob(record.job_id);
  // The request and its digest are fixed at AddJob, as in the SQLite store.
  JobRecord& stored = it->second.record;
  if (stored.version != record.version) {
    return JobChanged(record.job_id, record.version, stored.version);
  }
  stored.version = record.version + 1;
  stored.state = record.state;
  stored.start_time = record.start_time;
  stored.end_time = record.end_time;
  stored.reason = record.reason;
  stored.resumed = record.resumed;
  stored.finished = record.finished;
  stored.total_rows = record.total_rows;
  stored.total_shards = record.total_shards;
  stored.last_sequence = record.last_sequence;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> MemoryJobStore::LoadJobsById(
    absl::Span<const std::string> job_ids) {
  absl::MutexLock lock(&mu_);
  std::vector<JobRecord> records;
  for (const std::string& job_id : job_ids) {
    auto it = records_.find(job_id);
    if (it != records_.end()) records.push_back(it->second.record);
  }
  return records;
}

absl::Status MemoryJobStore::RemoveJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  records_.erase(job_id);
  job_datasets_.erase(job_id);
  logs_.erase(job_id);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> MemoryJobStore::LoadJobs() {
  std::vector<const NumberedRecord*> in_order;
  absl::MutexLock lock(&mu_);
  in_order.reserve(records_.size());
  for (const auto& [id, numbered] : records_) in_order.push_back(&numbered);
  std::sort(in_order.begin(), in_order.end(),
            [](const NumberedRecord* a, const NumberedRecord* b) {
              return a->added < b->added;
            });
  std::vector<JobRecord> records;
  records.reserve(in_order.size());
  for (const NumberedRecord* numbered : in_order) {
    records.push_back(numbered->record);
  }
  return records;
}

absl::StatusOr<std::shared_ptr<EventLog>> MemoryJobStore::OpenJobLog(
    const std::string& job_id, absl::FunctionRef<void(const LogEvent&)>) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<EventLog>& log = logs_[job_id];
  if (log == nullptr) log = MemoryEventLog::Create();
  return log;
}

std::shared_ptr<EventLog> MemoryJobStore::OpenFinishedJobLog(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<EventLog>& log = logs_[job_id];
  if (log == nullptr) log = MemoryEventLog::Create();
  return log;
}

absl::StatusOr<StorageUsage> MemoryJobStore::TenantUsage(const std::string&) {
  return absl::UnimplementedError(
      "the --ephemeral store keeps nothing on disk: a storage quota "
      "(--tenant_storage_quota_mib) needs the durable store");
}

}  // namespace sdg
