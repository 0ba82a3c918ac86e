#include "tests/store/store_conformance.h"

#include <gmock/gmock.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tests/testing/store_test_data.h"

namespace sdg {

void PrintTo(const StoreKind& kind, std::ostream* out) { *out << kind.name; }

std::string StoreName(const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param.name;
}

google::protobuf::Struct Row(const std::string& question) {
  google::protobuf::Struct row;
  (*row.mutable_fields())["q"].set_string_value(question);
  return row;
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Record;
using testing::ResultOfShard;

std::vector<std::string> Questions(const Dataset& dataset, int64_t first,
                                   int64_t count) {
  std::vector<std::string> questions;
  auto rows = dataset.ReadRows(first, count);
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (!rows.ok()) return questions;
  for (const auto& row : *rows) {
    questions.push_back(row.fields().at("q").string_value());
  }
  return questions;
}

// What a reader after `after` reads now: each event's sequence and shard.
struct ReadBack {
  std::vector<uint64_t> sequences;
  std::vector<int64_t> shards;
  std::optional<absl::Status> end;
};

ReadBack ReadAfter(EventLog& log, uint64_t after) {
  ReadBack read;
  auto reader = log.Read(after);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return read;
  while (true) {
    auto next = (*reader)->Next();
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) break;
    LogEvent event;
    EXPECT_TRUE(event.ParseFromString((*next)->bytes));
    read.sequences.push_back((*next)->sequence);
    read.shards.push_back(event.shard_result().shard_index());
  }
  read.end = (*reader)->End();
  return read;
}

// --- Records ---------------------------------------------------------------

TEST_P(StoreConformanceTest, AddedJobsLoadOldestFirstWithEveryField) {
  ASSERT_TRUE(store_->AddJob(Record("b", "bob")).ok());
  ASSERT_TRUE(store_->AddJob(Record("a", "alice")).ok());
  auto records = store_->LoadJobs();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].job_id, "b");
  const JobRecord& a = (*records)[1];
  EXPECT_EQ(a.job_id, "a");
  EXPECT_EQ(a.tenant, "alice");
  EXPECT_EQ(a.request.block().model(), "m");
  EXPECT_EQ(a.request_digest, "digest-a");
  EXPECT_EQ(a.state, v1::JOB_STATE_QUEUED);
  EXPECT_EQ(a.create_time, absl::FromUnixSeconds(1700000000));
  EXPECT_EQ(a.start_time, absl::InfinitePast());
  EXPECT_EQ(a.end_time, absl::InfinitePast());
}

TEST_P(StoreConformanceTest, AddingAJobIdStoredAlreadyIsAlreadyExists) {
  ASSERT_TRUE(store_->AddJob(Record("a")).ok());
  EXPECT_EQ(store_->AddJob(Record("a", "someone else")).code(),
            absl::StatusCode::kAlreadyExists);
  auto records = store_->LoadJobs();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].tenant, "t");
}

TEST_P(StoreConformanceTest, AnUpdateKeepsStateTimesAndCountsButNotTheRequest) {
  ASSERT_TRUE(store_->AddJob(Record("a")).ok());
  JobRecord done = Record("a");
  done.state = v1::JOB_STATE_SUCCEEDED;
  done.start_time = absl::FromUnixSeconds(1700000010);
  done.end_time = absl::FromUnixSeconds(1700000100);
  done.reason = "all rows generated";
  done.resumed = 2;
  done.finished.set_rows_succeeded(7);
  done.request.mutable_block()->set_model("changed after the fact");
  ASSERT_TRUE(store_->UpdateJob(done).ok());
  auto records = store_->LoadJobs();
  ASSERT_EQ(records->size(), 1u);
  const JobRecord& a = (*records)[0];
  EXPECT_EQ(a.state, v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(a.start_time, absl::FromUnixSeconds(1700000010));
  EXPECT_EQ(a.end_time, absl::FromUnixSeconds(1700000100));
  EXPECT_EQ(a.reason, "all rows generated");
  EXPECT_EQ(a.resumed, 2);
  EXPECT_EQ(a.finished.rows_succeeded(), 7);
  EXPECT_EQ(a.request.block().model(), "m");
}

TEST_P(StoreConformanceTest, OneJobLoadsByItsIdWithItsTotals) {
  ASSERT_TRUE(store_->AddJob(Record("a", "alice")).ok());
  ASSERT_TRUE(store_->AddJob(Record("b", "bob")).ok());
  JobRecord done = Record("b", "bob");
  done.state = v1::JOB_STATE_FAILED;
  done.end_time = absl::FromUnixSeconds(1700000100);
  done.finished.set_state(v1::JOB_STATE_FAILED);
  done.total_rows = 5'000'000'000;
  done.total_shards = 625'000'000;
  done.last_sequence = 625'000'002;
  ASSERT_TRUE(store_->UpdateJob(done).ok());

  absl::StatusOr<JobRecord> b = store_->LoadJob("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->tenant, "bob");
  EXPECT_EQ(b->state, v1::JOB_STATE_FAILED);
  EXPECT_EQ(b->end_time, absl::FromUnixSeconds(1700000100));
  EXPECT_EQ(b->finished.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(b->total_rows, 5'000'000'000);
  EXPECT_EQ(b->total_shards, 625'000'000);
  EXPECT_EQ(b->last_sequence, 625'000'002u);
  absl::StatusOr<JobRecord> a = store_->LoadJob("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->state, v1::JOB_STATE_QUEUED);
  EXPECT_EQ(a->last_sequence, 0u);

  absl::StatusOr<JobRecord> ghost = store_->LoadJob("ghost");
  EXPECT_EQ(ghost.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ghost.status().message(), HasSubstr("ghost"));
}

TEST_P(StoreConformanceTest, JobsLoadByIdInTheOrderAskedSkippingTheAbsent) {
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(store_->AddJob(Record(id, absl::StrCat("tenant-", id))).ok());
  }
  const std::vector<std::string> ids = {"c", "ghost", "a"};
  absl::StatusOr<std::vector<JobRecord>> records = store_->LoadJobsById(ids);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].job_id, "c");
  EXPECT_EQ((*records)[0].tenant, "tenant-c");
  EXPECT_EQ((*records)[1].job_id, "a");
  EXPECT_EQ((*records)[1].request.block().model(), "m");
  EXPECT_TRUE(store_->LoadJobsById({})->empty());
  // The store stays usable: a write after the read goes through.
  JobRecord running = Record("b", "tenant-b");
  running.state = v1::JOB_STATE_RUNNING;
  EXPECT_TRUE(store_->UpdateJob(running).ok());
  EXPECT_EQ(store_->LoadJob("b")->state, v1::JOB_STATE_RUNNING);
}

// Compare and set: a record is saved only over the version it was read
// (or last saved) at, so a writer that lost the job to another cannot
// overwrite what that one saved.
TEST_P(StoreConformanceTest, AnUpdateLandsOnlyOverTheVersionItWasReadAt) {
  JobRecord added = Record("a");
  added.version = 41;  // AddJob stores version 1 whatever it is given
  ASSERT_TRUE(store_->AddJob(added).ok());
  const absl::StatusOr<JobRecord> read = store_->LoadJob("a");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->version, 1);

  JobRecord running = *read;
  running.state = v1::JOB_STATE_RUNNING;
  ASSERT_TRUE(store_->UpdateJob(running).ok());
  EXPECT_EQ(store_->LoadJob("a")->version, 2);

  JobRecord stale = *read;
  stale.state = v1::JOB_STATE_CANCELLED;
  absl::Status refused = store_->UpdateJob(stale);
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("\"a\""));
  EXPECT_THAT(refused.message(), HasSubstr("version 1 expected, 2 stored"));
  EXPECT_EQ(store_->LoadJob("a")->state, v1::JOB_STATE_RUNNING);

  JobRecord fresh = *store_->LoadJob("a");
  fresh.state = v1::JOB_STATE_CANCELLED;
  ASSERT_TRUE(store_->UpdateJob(fresh).ok());
  EXPECT_EQ(store_->LoadJobs()->at(0).version, 3);
  EXPECT_EQ(store_->LoadJobsById({"a"})->at(0).state, v1::JOB_STATE_CANCELLED);
}

TEST_P(StoreConformanceTest, UpdatingAJobNotStoredIsNotFoundNamingIt) {
  absl::Status updated = store_->UpdateJob(Record("ghost"));
  EXPECT_EQ(updated.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(updated.message(), HasSubstr("ghost"));
  EXPECT_TRUE(store_->LoadJobs()->empty());
}

TEST_P(StoreConformanceTest, ARemovedJobTakesItsDatasetAndEventsWithIt) {
  ASSERT_TRUE(store_->AddJob(Record("a")).ok());
  auto builder = store_->NewJobDataset("a");
  ASSERT_TRUE(builder.ok());
  ASSERT_TRUE((*builder)->Add(Row("why?")).ok());
  ASSERT_TRUE((*builder)->Finish().ok());
  std::shared_ptr<EventLog> log = OpenLog("a");
  LogEvent event = ResultOfShard(0);
  log->Append(event);
  log->End(absl::OkStatus());
  log->AwaitCommitted();
  log.reset();

  ASSERT_TRUE(store_->RemoveJob("a").ok());
  EXPECT_TRUE(store_->LoadJobs()->empty());
  EXPECT_EQ(store_->OpenJobDataset("a").status().code(),
            absl::StatusCode::kNotFound);
  std::vector<int64_t> replayed;
  std::shared_ptr<EventLog> again = OpenLog("a", &replayed);
  EXPECT_TRUE(replayed.empty());
  EXPECT_EQ(again->last_sequence(), 0u);
  // Removing what is not there is not an error: a retried delete succeeds.
  EXPECT_TRUE(store_->RemoveJob("a").ok());
}

// --- Datasets and uploads --------------------------------------------------

TEST_P(StoreConformanceTest, AJobsDatasetReadsBackAnyRangeOfItsRows) {
  auto builder = store_->NewJobDataset("a");
  ASSERT_TRUE(builder.ok()) << builder.status();
  for (const char* q : {"q0", "q1", "q2", "q3", "q4"}) {
    ASSERT_TRUE((*builder)->Add(Row(q)).ok());
  }
  EXPECT_EQ((*builder)->info().rows, 5);
  ASSERT_TRUE((*builder)->Finish().ok());
  auto dataset = store_->OpenJobDataset("a");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->row_count(), 5);
  EXPECT_THAT(Questions(**dataset, 0, 2), ElementsAre("q0", "q1"));
  EXPECT_THAT(Questions(**dataset, 3, 2), ElementsAre("q3", "q4"));

  // As stored: each row serialized, the same rows.
  std::vector<std::string> encoded;
  ASSERT_TRUE(
      (*dataset)
          ->ReadEncodedRows(1, 3,
                            [&](absl::string_view row) {
                              google::protobuf::Struct parsed;
                              EXPECT_TRUE(parsed.ParseFromArray(
                                  row.data(), static_cast<int>(row.size())));
                              encoded.push_back(
                                  parsed.fields().at("q").string_value());
                              return absl::OkStatus();
                            })
          .ok());
  EXPECT_THAT(encoded, ElementsAre("q1", "q2", "q3"));
  // The reader's error ends the reading.
  int calls = 0;
  absl::Status stopped =
      (*dataset)->ReadEncodedRows(0, 5, [&](absl::string_view) {
        ++calls;
        return absl::CancelledError("enough");
      });
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

TEST_P(StoreConformanceTest, ADiscardedJobDatasetIsGone) {
  auto builder = store_->NewJobDataset("refused");
  ASSERT_TRUE(builder.ok());
  ASSERT_TRUE((*builder)->Add(Row("q")).ok());
  ASSERT_TRUE((*builder)->Finish().ok());
  store_->DiscardJobDataset("refused");
  EXPECT_EQ(store_->OpenJobDataset("refused").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreConformanceTest, AnUploadIsFoundWithItsInfoTenantAndTime) {
  Upload("ds", {"a", "b"}, absl::FromUnixSeconds(1700000000), "alice");
  auto found = store_->FindUpload("ds");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->dataset.dataset_id(), "ds");
  EXPECT_EQ(found->dataset.rows(), 2);
  EXPECT_EQ(found->tenant, "alice");
  EXPECT_EQ(found->info.rows, 2);
  EXPECT_EQ(found->info.FirstRowMissing("q"), std::nullopt);
  EXPECT_EQ(found->info.FirstRowMissing("other"), 0);
  EXPECT_EQ(found->create_time, absl::FromUnixSeconds(1700000000));
}

TEST_P(StoreConformanceTest, AnUploadNotStoredIsNotFoundSayingToUploadIt) {
  absl::Status found = store_->FindUpload("nope").status();
  EXPECT_EQ(found.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(found.message(), HasSubstr("\"nope\"; upload it first"));
  absl::Status used = store_->UseUploadedDataset("nope", "job").status();
  EXPECT_EQ(used.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(used.message(), HasSubstr("\"nope\"; upload it first"));
  EXPECT_EQ(store_->OpenJobDataset("job").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreConformanceTest, AnUploadOpensForReadingWithoutAJobTakingIt) {
  Upload("ds", {"a", "b", "c"}, absl::FromUnixSeconds(1700000000));
  auto opened = store_->OpenUpload("ds");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->row_count(), 3);
  EXPECT_THAT(Questions(**opened, 1, 2), ElementsAre("b", "c"));
  // Reading it gave no job its rows, and it prunes as any upload does.
  EXPECT_EQ(store_->OpenJobDataset("ds").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_EQ(*store_->PruneUploads(absl::FromUnixSeconds(1700000001)), 1);
  absl::Status gone = store_->OpenUpload("ds").status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("\"ds\"; upload it first"));
}

TEST_P(StoreConformanceTest, SavingAnUploadIdTwiceIsAlreadyExists) {
  Upload("ds", {"a"}, absl::FromUnixSeconds(1700000000));
  StoredDataset again;
  again.dataset.set_dataset_id("ds");
  EXPECT_EQ(store_->SaveUpload(again).code(), absl::StatusCode::kAlreadyExists);
}

TEST_P(StoreConformanceTest, AJobKeepsItsRowsOfAnUploadPrunedAfterIt) {
  Upload("ds", {"a", "b"}, absl::FromUnixSeconds(1700000000));
  auto used = store_->UseUploadedDataset("ds", "job");
  ASSERT_TRUE(used.ok()) << used.status();
  ASSERT_EQ(*store_->PruneUploads(absl::FromUnixSeconds(1700000001)), 1);
  EXPECT_EQ(store_->FindUpload("ds").status().code(),
            absl::StatusCode::kNotFound);
  auto dataset = store_->OpenJobDataset("job");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(Questions(**dataset, 0, 2), ElementsAre("a", "b"));
}

TEST_P(StoreConformanceTest, PruningTakesOnlyUploadsSavedBeforeTheCutoff) {
  Upload("old", {"a"}, absl::FromUnixSeconds(1700000000));
  Upload("new", {"b"}, absl::FromUnixSeconds(1700000100));
  EXPECT_EQ(*store_->PruneUploads(absl::FromUnixSeconds(1700000000)), 0);
  EXPECT_EQ(*store_->PruneUploads(absl::FromUnixSeconds(1700000050)), 1);
  EXPECT_EQ(store_->FindUpload("old").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->FindUpload("new").ok());
}

TEST_P(StoreConformanceTest, AnUploadPastItsOwnExpiryIsPrunedWhateverItsAge) {
  // A batch's output file with output_expires_after: it goes when that
  // passes, though the retention's cutoff would keep it.
  const absl::Time now = absl::Now();
  const absl::Time later =
      absl::FromUnixSeconds(absl::ToUnixSeconds(now) + 3600);
  Upload("expired", {"a"}, now, "t", now - absl::Seconds(1));
  Upload("expiring", {"b"}, now, "t", later);
  Upload("kept", {"c"}, now);
  EXPECT_EQ(*store_->PruneUploads(now - absl::Hours(24)), 1);
  EXPECT_EQ(store_->FindUpload("expired").status().code(),
            absl::StatusCode::kNotFound);
  auto expiring = store_->FindUpload("expiring");
  ASSERT_TRUE(expiring.ok()) << expiring.status();
  EXPECT_EQ(expiring->expire_time, later);
  auto kept = store_->FindUpload("kept");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->expire_time, absl::InfiniteFuture());
  auto listed = store_->ListUploads("t");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(
      (*listed)[0].expire_time == later || (*listed)[1].expire_time == later,
      true);
}

TEST_P(StoreConformanceTest, ATenantsUploadsListOldestFirstWithTheirNames) {
  Upload("b-new", {"x"}, absl::FromUnixSeconds(1700000100), "alice");
  Upload("a-old", {"x", "y"}, absl::FromUnixSeconds(1700000000), "alice");
  Upload("bobs", {"x"}, absl::FromUnixSeconds(1700000050), "bob");
  StoredDataset named;
  named.dataset.set_dataset_id("named");
  named.dataset.set_filename("lines.jsonl");
  named.dataset.set_purpose("batch");
  named.tenant = "alice";
  named.create_time = absl::FromUnixSeconds(1700000200);
  auto builder = store_->NewUpload("named");
  ASSERT_TRUE(builder.ok()) << builder.status();
  ASSERT_TRUE((*builder)->Finish().ok());
  ASSERT_TRUE(store_->SaveUpload(named).ok());

  auto listed = store_->ListUploads("alice");
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> ids;
  for (const StoredDataset& upload : *listed) {
    ids.push_back(upload.dataset.dataset_id());
  }
  EXPECT_THAT(ids, ElementsAre("a-old", "b-new", "named"));
  EXPECT_EQ((*listed)[0].info.rows, 2);
  EXPECT_EQ((*listed)[2].dataset.filename(), "lines.jsonl");
  EXPECT_EQ((*listed)[2].dataset.purpose(), "batch");
  EXPECT_EQ((*listed)[2].create_time, absl::FromUnixSeconds(1700000200));
  ASSERT_TRUE(store_->ListUploads("carol").ok());
  EXPECT_TRUE(store_->ListUploads("carol")->empty());
}

TEST_P(StoreConformanceTest, ARemovedUploadIsGoneButAJobKeepsItsRows) {
  Upload("ds", {"a", "b"}, absl::FromUnixSeconds(1700000000));
  ASSERT_TRUE(store_->UseUploadedDataset("ds", "job").ok());
  ASSERT_TRUE(store_->RemoveUpload("ds").ok());
  EXPECT_EQ(store_->FindUpload("ds").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->OpenUpload("ds").status().code(),
            absl::StatusCode::kNotFound);
  auto dataset = store_->OpenJobDataset("job");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(Questions(**dataset, 0, 2), ElementsAre("a", "b"));
  absl::Status again = store_->RemoveUpload("ds");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(again.message(), HasSubstr("\"ds\""));
}

// --- Event logs --------------------------------------------------------------

TEST_P(StoreConformanceTest, EventsAreNumberedAndReadInOrderOnceCommitted) {
  std::shared_ptr<EventLog> log = OpenLog("j");
  std::vector<uint64_t> numbered;
  for (int64_t shard : {4, 2, 7}) {
    LogEvent event = ResultOfShard(shard);
    numbered.push_back(log->Append(event));
    EXPECT_EQ(event.sequence(), numbered.back());
  }
  EXPECT_THAT(numbered, ElementsAre(1, 2, 3));
  log->AwaitCommitted();
  ASSERT_TRUE(log->commit_error().ok());
  EXPECT_EQ(log->last_sequence(), 3u);  // the last one committed
  ReadBack all = ReadAfter(*log, 0);
  EXPECT_THAT(all.sequences, ElementsAre(1, 2, 3));
  EXPECT_THAT(all.shards, ElementsAre(4, 2, 7));
  EXPECT_EQ(all.end, std::nullopt);  // more may come
  EXPECT_THAT(ReadAfter(*log, 2).shards, ElementsAre(7));
  EXPECT_TRUE(ReadAfter(*log, 3).sequences.empty());
}

TEST_P(StoreConformanceTest, AGroupIsNumberedTogetherAndReadWhole) {
  std::shared_ptr<EventLog> log = OpenLog("j");
  std::vector<LogEvent> group = {ResultOfShard(0), ResultOfShard(1),
                                 ResultOfShard(2)};
  EXPECT_EQ(log->AppendGroup(absl::MakeSpan(group)), 3u);
  EXPECT_EQ(group[0].sequence(), 1u);
  EXPECT_EQ(group[2].sequence(), 3u);
  log->AwaitCommitted();
  EXPECT_THAT(ReadAfter(*log, 0).shards, ElementsAre(0, 1, 2));
}

TEST_P(StoreConformanceTest, AReaderEndsWithTheLogsEndOnceItReadEverything) {
  std::shared_ptr<EventLog> log = OpenLog("j");
  LogEvent event = ResultOfShard(0);
  log->Append(event);
  log->End(absl::UnavailableError("suspended: sdgd is shutting down"));
  log->AwaitCommitted();
  ReadBack all = ReadAfter(*log, 0);
  EXPECT_THAT(all.shards, ElementsAre(0));
  ASSERT_TRUE(all.end.has_value());
  EXPECT_EQ(all.end->code(), absl::StatusCode::kUnavailable);
}

TEST_P(StoreConformanceTest, NotifyAfterRunsOnceForTheNextCommitNotBefore) {
  std::shared_ptr<EventLog> log = OpenLog("j");
  LogEvent first = ResultOfShard(0);
  log->Append(first);
  log->AwaitCommitted();
  // Already past sequence 0: nothing to wait for.
  EXPECT_FALSE(log->NotifyAfter(0, [] { ADD_FAILURE() << "ran"; }));
  absl::Notification notified;
  ASSERT_TRUE(log->NotifyAfter(1, [&] { notified.Notify(); }));
  EXPECT_FALSE(notified.HasBeenNotified());
  LogEvent second = ResultOfShard(1);
  log->Append(second);
  log->AwaitCommitted();
  notified.WaitForNotification();
  EXPECT_THAT(ReadAfter(*log, 1).shards, ElementsAre(1));
}

TEST_P(StoreConformanceTest, ConcurrentReadersEachReadEveryEventInOrder) {
  constexpr int kEvents = 300;
  constexpr int kReaders = 4;
  std::shared_ptr<EventLog> log = OpenLog("j");
  std::vector<std::vector<int64_t>> seen(kReaders);
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&log, &seen, r] {
      auto reader = log->Read(0);
      ASSERT_TRUE(reader.ok());
      while (true) {
        auto next = (*reader)->Next();
        ASSERT_TRUE(next.ok()) << next.status();
        if (next->has_value()) {
          LogEvent event;
          ASSERT_TRUE(event.ParseFromString((*next)->bytes));
          seen[r].push_back(event.shard_result().shard_index());
          continue;
        }
        if ((*reader)->End().has_value()) return;
        // Wait for the next commit, as a watcher does.
        absl::Notification more;
        if (log->NotifyAfter((*reader)->last_read(), [&] { more.Notify(); })) {
          more.WaitForNotification();
        }
      }
    });
  }
  for (int i = 0; i < kEvents; ++i) {
    LogEvent event = ResultOfShard(i);
    log->Append(event);
  }
  log->End(absl::OkStatus());
  for (std::thread& reader : readers) reader.join();
  std::vector<int64_t> expected(kEvents);
  for (int i = 0; i < kEvents; ++i) expected[i] = i;
  for (int r = 0; r < kReaders; ++r) EXPECT_EQ(seen[r], expected) << r;
}

TEST_P(StoreConformanceTest, AFinishedJobsLogReadsToItsEnd) {
  {
    std::shared_ptr<EventLog> log = OpenLog("j");
    for (int i = 0; i < 3; ++i) {
      LogEvent event = ResultOfShard(i);
      log->Append(event);
    }
    log->End(absl::OkStatus());
    log->AwaitCommitted();
  }
  std::shared_ptr<EventLog> finished = store_->OpenFinishedJobLog("j");
  ASSERT_NE(finished, nullptr);
  ReadBack all = ReadAfter(*finished, 1);
  EXPECT_THAT(all.shards, ElementsAre(1, 2));
  ASSERT_TRUE(all.end.has_value());
  EXPECT_TRUE(all.end->ok()) << *all.end;
}

// --- Durable stores only ---------------------------------------------------

TEST_P(DurableStoreConformanceTest, RecordsAndUploadsSurviveReopening) {
  ASSERT_TRUE(store_->AddJob(Record("b")).ok());
  ASSERT_TRUE(store_->AddJob(Record("a")).ok());
  JobRecord running = Record("a");
  running.state = v1::JOB_STATE_RUNNING;
  ASSERT_TRUE(store_->UpdateJob(running).ok());
  Upload("ds", {"x"}, absl::FromUnixSeconds(1700000000));
  Reopen();
  auto records = store_->LoadJobs();
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].job_id, "b");
  EXPECT_EQ((*records)[1].state, v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*records)[1].version, 2);
  EXPECT_TRUE(store_->FindUpload("ds").ok());
}

TEST_P(DurableStoreConformanceTest, AReopenedLogReplaysWhatWasCommitted) {
  {
    std::shared_ptr<EventLog> log = OpenLog("j");
    std::vector<LogEvent> group = {ResultOfShard(0), ResultOfShard(1)};
    log->AppendGroup(absl::MakeSpan(group));
    log->AwaitCommitted();
  }
  Reopen();
  std::vector<int64_t> replayed;
  std::shared_ptr<EventLog> log = OpenLog("j", &replayed);
  EXPECT_THAT(replayed, ElementsAre(0, 1));
  LogEvent next = ResultOfShard(2);
  log->Append(next);
  EXPECT_EQ(next.sequence(), 3u);  // numbering goes on
}

TEST_P(FileLogStoreConformanceTest, ATornTailIsCutBackToTheLastWholeGroup) {
  {
    std::shared_ptr<EventLog> log = OpenLog("j");
    LogEvent first = ResultOfShard(0);
    log->Append(first);
    std::vector<LogEvent> group = {ResultOfShard(1), ResultOfShard(2)};
    log->AppendGroup(absl::MakeSpan(group));
    log->AwaitCommitted();
  }
  Reopen();
  // A crash in the middle of writing the group: its last bytes never came.
  const std::string path = GetParam().log_path(dir_, "j");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  std::vector<int64_t> replayed;
  std::shared_ptr<EventLog> log = OpenLog("j", &replayed);
  EXPECT_THAT(replayed, ElementsAre(0));
  EXPECT_EQ(log->last_sequence(), 1u);
  LogEvent again = ResultOfShard(1);
  log->Append(again);
  log->AwaitCommitted();
  EXPECT_EQ(again.sequence(), 2u);
  EXPECT_THAT(ReadAfter(*log, 0).shards, ElementsAre(0, 1));
}

}  // namespace
}  // namespace sdg
