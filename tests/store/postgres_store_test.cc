// The store conformance suite against a real PostgreSQL (the ctest fixture's
// server, or one this binary starts: tests/testing/test_postgres.h), and
// what only the PostgreSQL store does: schema migrations, and errors that
// name the server but never the password.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/store/postgres_event_log.h"
#include "server/store/postgres_job_store.h"
#include "server/store/postgres_schema.h"
#include "tests/store/store_conformance.h"
#include "tests/testing/free_port.h"
#include "tests/testing/store_test_data.h"
#include "tests/testing/test_postgres.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A database per folder: the suite's Reopen opens the same one again.
std::string DatabaseFor(const std::string& dir) {
  return absl::StrCat("conformance_", std::hash<std::string>()(dir));
}

// `leased`: as a replica sharing the database (every write fenced by the
// replica lease; a reopened store takes the lease its predecessor released).
StoreKind PostgresStore(bool leased) {
  return {leased ? "postgresql_leased" : "postgresql", true,
          [leased](const std::string& dir)
              -> absl::StatusOr<std::unique_ptr<JobStore>> {
            absl::StatusOr<std::string> conninfo =
                testing::TestPostgres::Shared().Database(
                    DatabaseFor(absl::StrCat(dir, leased)));
            if (!conninfo.ok()) return conninfo.status();
            PostgresJobStore::Options options;
            options.conninfo = *conninfo;
            if (leased) options.replica_lease.emplace();
            absl::StatusOr<std::unique_ptr<PostgresJobStore>> store =
                PostgresJobStore::Open(std::move(options));
            if (!store.ok()) return store.status();
            return std::unique_ptr<JobStore>(*std::move(store));
          },
          nullptr};
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest,
                         ::testing::Values(PostgresStore(false),
                                           PostgresStore(true)),
                         StoreName);
INSTANTIATE_TEST_SUITE_P(Stores, DurableStoreConformanceTest,
                         ::testing::Values(PostgresStore(false),
                                           PostgresStore(true)),
                         StoreName);
// The event log is rows in a table: no file to tear.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FileLogStoreConformanceTest);

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    database_ = absl::StrCat("store_", std::hash<std::string>()(info->name()));
    ASSERT_TRUE(postgres_.DropDatabase(database_).ok());
    absl::StatusOr<std::string> conninfo = postgres_.Database(database_);
    ASSERT_TRUE(conninfo.ok()) << conninfo.status();
    conninfo_ = *conninfo;
  }

  absl::StatusOr<std::unique_ptr<PostgresJobStore>> OpenStore(
      const std::string& conninfo) {
    PostgresJobStore::Options options;
    options.conninfo = conninfo;
    return PostgresJobStore::Open(std::move(options));
  }

  std::unique_ptr<pg::Connection> Connect() {
    auto conn = pg::Connection::Open(conninfo_);
    EXPECT_TRUE(conn.ok()) << conn.status();
    return conn.ok() ? *std::move(conn) : nullptr;
  }

  std::vector<int> AppliedVersions() {
    std::vector<int> versions;
    auto conn = Connect();
    if (conn == nullptr) return versions;
    auto rows =
        conn->Exec("SELECT version FROM sdg_schema_migrations ORDER BY version",
                   "reading versions");
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return versions;
    for (int i = 0; i < rows->rows(); ++i) {
      versions.push_back(rows->Int32(i, 0));
    }
    return versions;
  }

  std::vector<int> AllVersions() {
    std::vector<int> versions;
    for (int v = 1; v <= LatestSchemaVersion(); ++v) versions.push_back(v);
    return versions;
  }

  testing::TestPostgres& postgres_ = testing::TestPostgres::Shared();
  std::string database_;
  std::string conninfo_;
};

TEST_F(PostgresStoreTest, AStoreAtThePreviousSchemaIsMigratedAndKeepsItsJobs) {
  {
    auto conn = Connect();
    ASSERT_NE(conn, nullptr);
    ASSERT_TRUE(MigrateSchema(*conn, LatestSchemaVersion() - 1).ok());
  }
  EXPECT_EQ(AppliedVersions().size(),
            static_cast<size_t>(LatestSchemaVersion() - 1));
  auto store = OpenStore(conninfo_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(AppliedVersions(), AllVersions());
  ASSERT_TRUE((*store)->AddJob(testing::Record("j")).ok());
  store->reset();
  // Opening again migrates nothing and finds the job.
  store = OpenStore(conninfo_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(AppliedVersions(), AllVersions());
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].job_id, "j");
}

// Version 2 stored a dataset a row per table row (dataset_rows); version 3
// moves them into chunks, and the job's rows read the same.
TEST_F(PostgresStoreTest, ADatasetStoredRowByRowIsReadAfterTheMoveToChunks) {
  constexpr int kRowByRowSchema = 2;
  constexpr int kRows = 5;
  {
    auto conn = Connect();
    ASSERT_NE(conn, nullptr);
    ASSERT_TRUE(MigrateSchema(*conn, kRowByRowSchema).ok());
    auto created = conn->Exec(
        "INSERT INTO datasets (row_count, bytes, complete, create_ns) "
        "VALUES (5, 0, true, 1) RETURNING dataset",
        "creating a dataset");
    ASSERT_TRUE(created.ok()) << created.status();
    const int64_t dataset = created->Int64(0, 0);
    for (int i = 0; i < kRows; ++i) {
      // Row 3 is empty: a zero-length chunk row must read as a row.
      const std::string row =
          i == 3 ? std::string()
                 : Row(absl::StrCat("old ", i)).SerializeAsString();
      ASSERT_TRUE(conn->Exec("INSERT INTO dataset_rows (dataset, row_index, "
                             "row) VALUES ($1, $2, $3)",
                             pg::Params().Int64(dataset).Int64(i).Bytes(row),
                             "storing a row")
                      .ok());
    }
    ASSERT_TRUE(conn->Exec("INSERT INTO dataset_holders (holder, dataset) "
                           "VALUES ('job:j', $1)",
                           pg::Params().Int64(dataset), "holding it")
                    .ok());
  }
  auto store = OpenStore(conninfo_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto dataset = (*store)->OpenJobDataset("j");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  for (int first : {0, 2, 4}) {
    auto rows = (*dataset)->ReadRows(first, kRows);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), static_cast<size_t>(kRows - first));
    for (int i = first; i < kRows; ++i) {
      const google::protobuf::Struct& row = (*rows)[i - first];
      if (i == 3) {
        EXPECT_TRUE(row.fields().empty());
      } else {
        EXPECT_EQ(row.fields().at("q").string_value(), absl::StrCat("old ", i));
      }
    }
  }
}

TEST_F(PostgresStoreTest, ReplicasOpeningAtOnceMigrateOnce) {
  constexpr int kReplicas = 4;
  std::vector<absl::Status> opened(kReplicas);
  std::vector<std::thread> replicas;
  for (int i = 0; i < kReplicas; ++i) {
    replicas.emplace_back(
        [&, i] { opened[i] = OpenStore(conninfo_).status(); });
  }
  for (auto& replica : replicas) replica.join();
  for (const absl::Status& status : opened) EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(AppliedVersions(), AllVersions());
}

TEST_F(PostgresStoreTest, ADatabaseMigratedByANewerSdgdIsRefused) {
  ASSERT_TRUE(OpenStore(conninfo_).ok());
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->Exec("INSERT INTO sdg_schema_migrations (version) "
                         "VALUES (999)",
                         "faking a newer schema")
                  .ok());
  absl::Status refused = OpenStore(conninfo_).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(),
              HasSubstr(absl::StrCat("the schema is at version 999, newer "
                                     "than this sdgd's ",
                                     LatestSchemaVersion())));
}

// Options for a store that shares the database as a replica. The lease
// outlasts every test (renewed every 20 min), so only the tests move it.
PostgresJobStore::Options ReplicaOptions(const std::string& conninfo,
                                         const std::string& replica) {
  PostgresJobStore::Options options;
  options.conninfo = conninfo;
  options.replica_lease.emplace();
  options.replica_lease->replica = replica;
  options.replica_lease->ttl = absl::Hours(1);
  return options;
}

TEST_F(PostgresStoreTest, ASecondReplicaWaitsAsAStandbyAndTakesOverOnRelease) {
  auto first = PostgresJobStore::Open(ReplicaOptions(conninfo_, "first"));
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t first_epoch = (*first)->lease()->epoch();

  // Both leases last an hour: the standby would look again in 20 minutes
  // (a third of one); it takes over at once because the release wakes it.
  PostgresJobStore::Options options = ReplicaOptions(conninfo_, "second");
  absl::Notification standby;
  std::string active;
  options.replica_lease->on_standby = [&](const std::string& holder) {
    active = holder;
    standby.Notify();
  };
  absl::StatusOr<std::unique_ptr<PostgresJobStore>> second;
  std::thread opening(
      [&] { second = PostgresJobStore::Open(std::move(options)); });
  standby.WaitForNotification();
  EXPECT_EQ(active, "first");
  first->reset();  // releases the lease
  opening.join();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->lease()->epoch(), first_epoch + 1);
  EXPECT_TRUE((*second)->AddJob(testing::Record("j")).ok());
}

TEST_F(PostgresStoreTest,
       AStandbyStoppedWhileItWaitsIsCancelledNamingTheActive) {
  auto first = PostgresJobStore::Open(ReplicaOptions(conninfo_, "first"));
  ASSERT_TRUE(first.ok()) << first.status();
  PostgresJobStore::Options options = ReplicaOptions(conninfo_, "second");
  absl::Notification stop;
  options.replica_lease->stop_waiting = &stop;
  options.replica_lease->on_standby = [&](const std::string&) {
    stop.Notify();
  };
  absl::Status refused = PostgresJobStore::Open(std::move(options)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(refused.message(), HasSubstr("first holds the replica lease"));
}

// What each replica's heartbeats counted last, and a wait for a count.
class HeartbeatView {
 public:
  std::function<void(const ReplicaLease::LiveReplicas&)> Hook() {
    return [this](const ReplicaLease::LiveReplicas& live) {
      absl::MutexLock lock(&mu_);
      last_ = live;
    };
  }
  // True once a heartbeat counted `want` (false after a minute).
  bool AwaitCount(ReplicaLease::LiveReplicas want) {
    absl::MutexLock lock(&mu_);
    auto counted = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return last_ == want;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&counted), absl::Minutes(1));
  }

 private:
  absl::Mutex mu_;
  ReplicaLease::LiveReplicas last_ ABSL_GUARDED_BY(mu_);
};

TEST_F(PostgresStoreTest, ReplicasCountEachOtherAliveAndAStoppedOneGoes) {
  HeartbeatView active_view, standby_view;
  PostgresJobStore::Options first_options = ReplicaOptions(conninfo_, "first");
  // Heartbeats every 100 ms (a third of the lease).
  first_options.replica_lease->ttl = absl::Milliseconds(300);
  first_options.replica_lease->on_heartbeat = active_view.Hook();
  auto first = PostgresJobStore::Open(std::move(first_options));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(active_view.AwaitCount({1, 0}));

  PostgresJobStore::Options options = ReplicaOptions(conninfo_, "second");
  options.replica_lease->ttl = absl::Milliseconds(300);
  options.replica_lease->on_heartbeat = standby_view.Hook();
  absl::Notification stop;
  options.replica_lease->stop_waiting = &stop;
  absl::StatusOr<std::unique_ptr<PostgresJobStore>> second;
  std::thread opening(
      [&] { second = PostgresJobStore::Open(std::move(options)); });
  EXPECT_TRUE(standby_view.AwaitCount({1, 1}));
  EXPECT_TRUE(active_view.AwaitCount({1, 1}));

  // A standby that stops removes its row: the active counts it gone at
  // its next heartbeat, not a lease later.
  stop.Notify();
  opening.join();
  EXPECT_TRUE(absl::IsCancelled(second.status())) << second.status();
  EXPECT_TRUE(active_view.AwaitCount({1, 0}));
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  auto rows = conn->Exec("SELECT replica || ' ' || role FROM sdg_replicas",
                         "reading the heartbeats");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->rows(), 1);
  EXPECT_EQ(rows->String(0, 0), "first active");
  first->reset();
  rows = conn->Exec("SELECT count(*)::bigint FROM sdg_replicas", "counting");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->Int64(0, 0), 0) << "a stopped active removes its row too";
}

TEST_F(PostgresStoreTest, AReplicaWhoseLeaseWasTakenOverWritesNothingMore) {
  PostgresJobStore::Options first_options = ReplicaOptions(conninfo_, "first");
  std::vector<std::string> lost;  // on_lost runs once
  first_options.replica_lease->on_lost = [&](const absl::Status& error) {
    lost.emplace_back(error.message());
  };
  auto first = PostgresJobStore::Open(std::move(first_options));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->AddJob(testing::Record("j")).ok());
  auto log = (*first)->OpenJobLog("j", [](const LogEvent&) {});
  ASSERT_TRUE(log.ok()) << log.status();
  LogEvent committed = testing::ResultOfShard(0);
  (*log)->Append(committed);
  (*log)->AwaitCommitted();
  ASSERT_TRUE((*log)->commit_error().ok()) << (*log)->commit_error();

  // The first replica stops renewing (a partition, a stalled process) and
  // its lease expires; the second takes it over.
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->Exec("UPDATE sdg_replica_lease SET expires_at = "
                         "clock_timestamp() - interval '1 second'",
                         "expiring the lease")
                  .ok());
  auto second = PostgresJobStore::Open(ReplicaOptions(conninfo_, "second"));
  ASSERT_TRUE(second.ok()) << second.status();

  // The first one's writes are refused, and it hears so once.
  JobRecord running = testing::Record("j");
  running.state = v1::JOB_STATE_RUNNING;
  absl::Status refused = (*first)->UpdateJob(running);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(),
              HasSubstr("no longer holds the replica lease"));
  EXPECT_EQ((*first)->AddJob(testing::Record("k")).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*first)->RemoveJob("j").code(),
            absl::StatusCode::kFailedPrecondition);
  LogEvent fenced = testing::ResultOfShard(1);
  (*log)->Append(fenced);
  (*log)->AwaitCommitted();
  EXPECT_EQ((*log)->commit_error().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*log)->last_sequence(), 1u);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_THAT(lost[0], HasSubstr("this replica (first, epoch 1)"));

  // What the second one sees: the job as it was, its one committed event;
  // and its own writes go through.
  auto records = (*second)->LoadJobs();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].state, v1::JOB_STATE_QUEUED);
  std::vector<uint64_t> replayed;
  auto taken = (*second)->OpenJobLog("j", [&](const LogEvent& event) {
    replayed.push_back(event.sequence());
  });
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_THAT(replayed, ::testing::ElementsAre(1u));
  EXPECT_TRUE((*second)->UpdateJob(running).ok());
  LogEvent next = testing::ResultOfShard(1);
  (*taken)->Append(next);
  (*taken)->AwaitCommitted();
  EXPECT_TRUE((*taken)->commit_error().ok()) << (*taken)->commit_error();
  EXPECT_EQ(next.sequence(), 2u);
}

// A watcher reads what its log committed last from memory, and anything
// older from the table: a reader from the start crosses from one to the
// other and sees every event once, in order, as appended.
TEST_F(PostgresStoreTest, AReaderFromTheStartReadsTheTableThenWhatIsInMemory) {
  auto store = OpenStore(conninfo_);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddJob(testing::Record("j")).ok());
  auto log = (*store)->OpenJobLog("j", [](const LogEvent&) {});
  ASSERT_TRUE(log.ok()) << log.status();
  // Three times what a log keeps in memory, a round per event.
  const std::string text(64 << 10, 'x');
  const int events = 3 * PostgresEventLog::kRecentBytes / text.size();
  std::vector<std::string> appended;
  for (int i = 0; i < events; ++i) {
    LogEvent event = testing::ResultOfShard(i);
    (*event.mutable_shard_result()
          ->mutable_rows(0)
          ->mutable_columns()
          ->mutable_fields())["output"]
        .set_string_value(text);
    (*log)->Append(event);
    (*log)->AwaitCommitted();
    appended.push_back(event.SerializeAsString());
  }
  ASSERT_TRUE((*log)->commit_error().ok()) << (*log)->commit_error();

  for (uint64_t after : {uint64_t{0}, uint64_t(events - 3)}) {
    auto reader = (*log)->Read(after);
    ASSERT_TRUE(reader.ok()) << reader.status();
    uint64_t expected = after + 1;
    for (;;) {
      auto next = (*reader)->Next();
      ASSERT_TRUE(next.ok()) << next.status();
      if (!next->has_value()) break;
      ASSERT_EQ((*next)->sequence, expected);
      EXPECT_TRUE((*next)->bytes == appended[expected - 1])
          << "event " << expected << " differs from what was appended";
      ++expected;
    }
    EXPECT_EQ(expected, static_cast<uint64_t>(events) + 1)
        << "read from " << after;
  }
}

// sslmode=verify-full (the CloudNativePG overlay's): the server's
// certificate is checked against the CA given and the name connected to;
// a wrong CA or a name the certificate does not carry is refused, saying
// why and never showing the password.
TEST(PostgresTlsTest, VerifyFullChecksTheServersCertificateAndName) {
  auto postgres = testing::TestPostgres::StartPrivate(/*tls=*/true);
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  ASSERT_TRUE((*postgres)->Database("tls").ok());
  auto conninfo = [&](const std::string& host, const std::string& ca) {
    return absl::StrCat(
        "host=", host, " port=", (*postgres)->port(),
        " user=sdg dbname=tls password=", (*postgres)->password(),
        " sslmode=verify-full sslrootcert=", ca);
  };
  PostgresJobStore::Options options;
  options.conninfo = conninfo("localhost", (*postgres)->tls_ca());
  auto store = PostgresJobStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->AddJob(testing::Record("j")).ok());
  auto conn = pg::Connection::Open(options.conninfo);
  ASSERT_TRUE(conn.ok()) << conn.status();
  auto encrypted = (*conn)->Exec(
      "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
      "reading the connection's TLS");
  ASSERT_TRUE(encrypted.ok()) << encrypted.status();
  EXPECT_EQ(encrypted->String(0, 0), "true");

  struct Refusal {
    std::string host, ca, reason;
  };
  for (const Refusal& refusal : {Refusal{"localhost", (*postgres)->other_ca(),
                                         "certificate verify failed"},
                                 Refusal{"127.0.0.1", (*postgres)->tls_ca(),
                                         "does not match host name"}}) {
    options.conninfo = conninfo(refusal.host, refusal.ca);
    auto refused = PostgresJobStore::Open(options);
    ASSERT_FALSE(refused.ok()) << refusal.host << " " << refusal.ca;
    EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr(refusal.reason));
    EXPECT_THAT(refused.status().message(),
                Not(HasSubstr((*postgres)->password())));
  }
}

TEST_F(PostgresStoreTest, AWrongPasswordIsRefusedWithoutShowingIt) {
  const std::string wrong = "not-the-password-42";
  absl::Status refused =
      OpenStore(absl::StrCat(postgres_.Conninfo(database_, false),
                             " password=", wrong))
          .status();
  // Refused, not out of reach: asking again would not help.
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("password authentication failed"));
  EXPECT_THAT(refused.message(), Not(HasSubstr(wrong)));

  // A store that waits for its database does not wait for this.
  PostgresJobStore::Options options;
  options.conninfo =
      absl::StrCat(postgres_.Conninfo(database_, false), " password=", wrong);
  options.wait_for_database = true;
  EXPECT_EQ(PostgresJobStore::Open(std::move(options)).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// A replica whose database is down waits for it, and SIGTERM (the replica
// lease's stop_waiting) ends the wait: CANCELLED, not a crash.
TEST(PostgresWaitTest, AWaitForTheDatabaseEndsWhenTheReplicaStops) {
  auto postgres = testing::TestPostgres::StartPrivate();
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  absl::StatusOr<std::string> conninfo = (*postgres)->Database("waiting");
  ASSERT_TRUE(conninfo.ok()) << conninfo.status();
  ASSERT_TRUE((*postgres)->Pause().ok());
  absl::Notification stop;
  PostgresJobStore::Options options;
  options.conninfo = *conninfo;
  options.wait_for_database = true;
  options.replica_lease.emplace();
  options.replica_lease->stop_waiting = &stop;
  absl::Status opened;
  std::thread opening(
      [&] { opened = PostgresJobStore::Open(std::move(options)).status(); });
  stop.Notify();
  opening.join();
  EXPECT_EQ(opened.code(), absl::StatusCode::kCancelled) << opened;
  EXPECT_THAT(opened.message(),
              HasSubstr("stopped while waiting for PostgreSQL"));
}

TEST_F(PostgresStoreTest, NoServerOnThePortIsUnavailableNamingIt) {
  const int port = testing::FreeLoopbackPort();
  absl::Status refused =
      OpenStore(absl::StrCat("host=127.0.0.1 port=", port,
                             " user=sdg dbname=x password=secret-7"))
          .status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat(port)));
  EXPECT_THAT(refused.message(), Not(HasSubstr("secret-7")));
}

TEST_F(PostgresStoreTest, ADatasetIsReadByRangeAcrossItsBatches) {
  auto store = OpenStore(conninfo_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto builder = (*store)->NewJobDataset("big");
  ASSERT_TRUE(builder.ok()) << builder.status();
  // About 3 MiB: several of the builder's 1 MiB batches.
  const std::string padding(1000, 'x');
  constexpr int kRows = 3000;
  for (int i = 0; i < kRows; ++i) {
    ASSERT_TRUE((*builder)->Add(Row(absl::StrCat(i, padding))).ok());
  }
  ASSERT_TRUE((*builder)->Finish().ok());
  auto dataset = (*store)->OpenJobDataset("big");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->row_count(), kRows);
  auto rows = (*dataset)->ReadRows(1499, 3);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].fields().at("q").string_value(),
            absl::StrCat(1499, padding));
  EXPECT_EQ((*rows)[2].fields().at("q").string_value(),
            absl::StrCat(1501, padding));

  // Shards of 8 read by four workers at once, in order as the scheduler
  // hands them out, through read-ahead windows (about 1,000 of these rows
  // each), then a few out of order and past the end: each row is the one
  // asked for.
  std::vector<std::thread> workers;
  std::atomic<int> next_shard{0};
  std::atomic<int> wrong{0};
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      for (int shard; (shard = next_shard++) * 8 < kRows;) {
        auto read = (*dataset)->ReadRows(shard * 8, 8);
        if (!read.ok() || read->size() != 8) {
          ++wrong;
          continue;
        }
        for (int i = 0; i < 8; ++i) {
          if ((*read)[i].fields().at("q").string_value() !=
              absl::StrCat(shard * 8 + i, padding)) {
            ++wrong;
          }
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(wrong, 0);
  for (int first : {2990, 8, 2000, 7}) {
    auto read = (*dataset)->ReadRows(first, 16);
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->size(), static_cast<size_t>(std::min(16, kRows - first)));
    EXPECT_EQ(read->back().fields().at("q").string_value(),
              absl::StrCat(first + read->size() - 1, padding));
  }
}

TEST_F(PostgresStoreTest, ABuilderDroppedUnfinishedLeavesNoRows) {
  auto store = OpenStore(conninfo_);
  ASSERT_TRUE(store.ok()) << store.status();
  {
    auto builder = (*store)->NewUpload("half");
    ASSERT_TRUE(builder.ok()) << builder.status();
    const std::string padding(1 << 16, 'y');
    for (int i = 0; i < 40; ++i) {  // 2.5 MiB: batches were sent
      ASSERT_TRUE((*builder)->Add(Row(padding)).ok());
    }
  }
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  auto left = conn->Exec(
      "SELECT (SELECT count(*) FROM datasets)::bigint, "
      "(SELECT count(*) FROM dataset_chunks)::bigint",
      "counting");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->Int64(0, 0), 0);
  EXPECT_EQ(left->Int64(0, 1), 0);
}

}  // namespace
}  // namespace sdg
