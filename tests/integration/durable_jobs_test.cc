// Jobs that outlive their callers: CreateJob and WatchJob with sequences,
// idempotent submit, uploads and dataset paths, listing and deleting, in
// process against llmsim, on the durable store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

using ::testing::HasSubstr;

class DurableJobsTest : public ServiceFixture {
 protected:
  void SetUp() override { StartServer({{"sim", sim_.url()}}); }

  absl::StatusOr<v1::Job> Create(const v1::GenerateJobRequest& request) {
    grpc::ClientContext context;
    v1::Job job;
    grpc::Status status = stub_->CreateJob(&context, request, &job);
    if (!status.ok()) return FromGrpc(status);
    return job;
  }

  // WatchJob read to its end, or for `limit` events.
  Events Watch(const std::string& job_id, uint64_t after,
               size_t limit = SIZE_MAX) {
    grpc::ClientContext context;
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(after);
    auto reader = stub_->WatchJob(&context, request);
    Events events;
    v1::JobEvent event;
    while (events.all.size() < limit && reader->Read(&event)) {
      events.all.push_back(event);
    }
    if (events.all.size() == limit) context.TryCancel();
    events.status = reader->Finish();
    return events;
  }

  absl::StatusOr<v1::Dataset> Upload(const std::vector<std::string>& chunks,
                                     const std::string& id = "") {
    grpc::ClientContext context;
    v1::Dataset dataset;
    auto writer = stub_->UploadDataset(&context, &dataset);
    bool first = true;
    for (const std::string& data : chunks) {
      v1::DatasetChunk chunk;
      chunk.set_data(data);
      if (first) chunk.set_dataset_id(id);
      first = false;
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (!status.ok()) return FromGrpc(status);
    return dataset;
  }

  static v1::GenerateJobRequest Named(const std::string& id, int rows) {
    v1::GenerateJobRequest request = Request(rows);
    request.set_job_id(id);
    return request;
  }

  SimThread sim_;
};

TEST_F(DurableJobsTest, CreateReturnsAtOnceAndWatchReplaysEverything) {
  absl::StatusOr<v1::Job> job = Create(Named("detached", 10));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id(), "detached");
  EXPECT_EQ(job->total_rows(), 10);

  Events events = Watch("detached", 0);
  ASSERT_TRUE(events.status.ok()) << events.status.error_message();
  EXPECT_TRUE(events.all.front().has_started());
  EXPECT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(events.Rows().size(), 10u);
  for (size_t i = 0; i < events.all.size(); ++i) {
    EXPECT_EQ(events.all[i].sequence(), i + 1);
  }
  // After the end, a watcher still gets every event, the same ones.
  Events again = Watch("detached", 0);
  ASSERT_EQ(again.all.size(), events.all.size());
  for (size_t i = 0; i < events.all.size(); ++i) {
    EXPECT_TRUE(SameEvent(again.all[i], events.all[i]));
  }
}

TEST_F(DurableJobsTest, ReconnectingWithTheLastSequenceHasNoGapNorDuplicate) {
  ASSERT_TRUE(Create(Named("resume-watch", 30)).ok());
  Events whole = Watch("resume-watch", 0);
  ASSERT_EQ(whole.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  for (size_t cut = 1; cut < whole.all.size(); ++cut) {
    Events first = Watch("resume-watch", 0, cut);
    ASSERT_EQ(first.all.size(), cut);
    Events rest = Watch("resume-watch", first.all.back().sequence());
    ASSERT_TRUE(rest.status.ok());
    ASSERT_EQ(first.all.size() + rest.all.size(), whole.all.size()) << cut;
    for (size_t i = 0; i < rest.all.size(); ++i) {
      EXPECT_TRUE(SameEvent(rest.all[i], whole.all[cut + i]));
    }
  }
}

TEST_F(DurableJobsTest, TwoWatchersOfARunningJobSeeTheSameEvents) {
  SimThread slow(WithLatency(absl::Milliseconds(30)));
  RestartServer({{"sim", slow.url()}});
  ASSERT_TRUE(Create(Named("shared", 24)).ok());
  Events a, b;
  std::thread other([&] { b = Watch("shared", 0); });
  a = Watch("shared", 0);
  other.join();
  ASSERT_EQ(a.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(a.all.size(), b.all.size());
  for (size_t i = 0; i < a.all.size(); ++i) {
    EXPECT_TRUE(SameEvent(a.all[i], b.all[i]));
  }
}

TEST_F(DurableJobsTest, IdempotentCreateAndConflictingCreate) {
  v1::GenerateJobRequest request = Named("once", 5);
  ASSERT_TRUE(Create(request).ok());
  absl::StatusOr<v1::Job> again = Create(request);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->job_id(), "once");
  EXPECT_EQ(Watch("once", 0).Finished().rows_succeeded(), 5);
  EXPECT_EQ(sim_.Stats()["requests"], 5);  // one job, not two
  request.set_batch_size(1);
  EXPECT_EQ(Create(request).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(DurableJobsTest, UploadedDatasetRunsAndABadLineIsNamed) {
  absl::StatusOr<v1::Dataset> dataset =
      Upload({"{\"id\": 0, \"question\": \"a\"}\n{\"id\": 1, \"ques",
              "tion\": \"b\"}\n{\"id\": 2, \"question\": \"c\"}"},
             "three");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->dataset_id(), "three");
  EXPECT_EQ(dataset->rows(), 3);
  EXPECT_EQ(dataset->sha256().size(), 64u);

  v1::GenerateJobRequest request = Named("from-upload", 0);
  request.set_dataset_id("three");
  ASSERT_TRUE(Create(request).ok());
  Events events = Watch("from-upload", 0);
  EXPECT_EQ(events.Finished().rows_succeeded(), 3);
  EXPECT_EQ(events.Rows()[2].columns().fields().at("question").string_value(),
            "c");

  absl::StatusOr<v1::Dataset> bad = Upload(
      {"{\"id\": 0}\n", "{\"id\": 1}\n{\"id\": 2\n{\"id\": 3}\n"}, "bad");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("line 3: not a JSON object"));
  // Nothing was stored under that id.
  request.set_job_id("from-bad");
  request.set_dataset_id("bad");
  EXPECT_EQ(Create(request).status().code(), absl::StatusCode::kNotFound);
  // A template column that some row lacks is refused at create time.
  ASSERT_TRUE(
      Upload({"{\"id\": 0, \"question\": \"a\"}\n{\"id\": 1}\n"}, "gappy")
          .ok());
  request.set_job_id("from-gappy");
  request.set_dataset_id("gappy");
  EXPECT_EQ(Create(request).status().message(),
            "block.prompt_template: column \"question\" is missing from row 1");
}

TEST_F(DurableJobsTest, DatasetPathMustStayUnderTheDataRoot) {
  const std::string root = MakeTempDir();
  const std::string outside = MakeTempDir();
  std::ofstream(root + "/in.jsonl") << "{\"id\": 7, \"question\": \"q\"}\n";
  std::ofstream(outside + "/secret.jsonl")
      << "{\"id\": 1, \"question\": \"s\"}\n";
  std::filesystem::create_symlink(outside + "/secret.jsonl",
                                  root + "/link.jsonl");
  ServerOptions options;
  options.service.data_root = root;
  RestartServer({{"sim", sim_.url()}}, options);

  v1::GenerateJobRequest request = Named("by-path", 0);
  request.set_dataset_path("in.jsonl");
  ASSERT_TRUE(Create(request).ok());
  EXPECT_EQ(Watch("by-path", 0).Finished().rows_succeeded(), 1);

  request.set_job_id("dotdot");
  request.set_dataset_path("../" +
                           std::filesystem::path(outside).filename().string() +
                           "/secret.jsonl");
  absl::Status dotdot = Create(request).status();
  EXPECT_EQ(dotdot.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dotdot.message(), HasSubstr("\"..\""));

  request.set_job_id("symlink");
  request.set_dataset_path("link.jsonl");
  absl::Status symlink = Create(request).status();
  EXPECT_EQ(symlink.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(symlink.message(), HasSubstr("outside --data_root"));

  request.set_job_id("absolute");
  request.set_dataset_path(outside + "/secret.jsonl");
  EXPECT_EQ(Create(request).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sim_.Stats()["requests"], 1);
}

TEST_F(DurableJobsTest, ListPagesFilterAndDeleteRemovesTheFiles) {
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(Create(Named(id, 2)).ok());
    ASSERT_EQ(Watch(id, 0).Finished().state(), v1::JOB_STATE_SUCCEEDED);
  }
  std::vector<std::string> ids;
  v1::ListJobsRequest list;
  list.set_page_size(2);
  do {
    grpc::ClientContext context;
    v1::ListJobsResponse page;
    ASSERT_TRUE(stub_->ListJobs(&context, list, &page).ok());
    EXPECT_LE(page.jobs_size(), 2);
    for (const v1::Job& job : page.jobs()) ids.push_back(job.job_id());
    list.set_page_token(page.next_page_token());
  } while (!list.page_token().empty());
  EXPECT_THAT(ids, ::testing::ElementsAre("a", "b", "c"));

  list.Clear();
  list.set_state(v1::JOB_STATE_RUNNING);
  grpc::ClientContext filtered_context;
  v1::ListJobsResponse filtered;
  ASSERT_TRUE(stub_->ListJobs(&filtered_context, list, &filtered).ok());
  EXPECT_EQ(filtered.jobs_size(), 0);

  ASSERT_TRUE(std::filesystem::exists(state_dir_ + "/jobs/b/events.log"));
  grpc::ClientContext delete_context;
  v1::DeleteJobRequest remove;
  remove.set_job_id("b");
  google::protobuf::Empty empty;
  ASSERT_TRUE(stub_->DeleteJob(&delete_context, remove, &empty).ok());
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/jobs/b"));
  EXPECT_EQ(GetJob("b").status().code(), absl::StatusCode::kNotFound);
  // And it stays deleted after a restart.
  RestartServer({{"sim", sim_.url()}});
  EXPECT_EQ(GetJob("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GetJob("c")->rows_succeeded(), 2);
  EXPECT_EQ(Watch("c", 0).Finished().rows_succeeded(), 2);
}

// A finished job reads the same after a restart: GetJob and ListJobs show
// what they showed before it (its counts, its sequence, its block).
TEST_F(DurableJobsTest, AFinishedJobReadsTheSameAfterARestart) {
  ASSERT_TRUE(Create(Named("kept", 12)).ok());
  Events events = Watch("kept", 0);
  ASSERT_EQ(events.Finished().state(), v1::JOB_STATE_SUCCEEDED);
  absl::StatusOr<v1::Job> before = GetJob("kept");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->last_sequence(), events.all.back().sequence());
  EXPECT_EQ(before->total_shards(), 4);

  RestartServer({{"sim", sim_.url()}});
  absl::StatusOr<v1::Job> after = GetJob("kept");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->DebugString(), before->DebugString());

  grpc::ClientContext context;
  v1::ListJobsResponse page;
  ASSERT_TRUE(stub_->ListJobs(&context, v1::ListJobsRequest(), &page).ok());
  ASSERT_EQ(page.jobs_size(), 1);
  EXPECT_EQ(page.jobs(0).DebugString(), before->DebugString());
  // A watcher continuing from the sequence GetJob gives gets nothing more.
  EXPECT_TRUE(Watch("kept", after->last_sequence()).all.empty());
}

TEST_F(DurableJobsTest, EphemeralServerServesTheSameApiAndWritesNothing) {
  ServerOptions options;
  options.ephemeral = true;
  options.state_dir = MakeTempDir() + "/never";
  server_.reset();
  StartServer({{"sim", sim_.url()}}, options);
  ASSERT_TRUE(Upload({"{\"id\": 0, \"question\": \"a\"}\n"}, "one").ok());
  v1::GenerateJobRequest request = Named("in-memory", 0);
  request.set_dataset_id("one");
  ASSERT_TRUE(Create(request).ok());
  Events events = Watch("in-memory", 0);
  EXPECT_EQ(events.Finished().rows_succeeded(), 1);
  EXPECT_EQ(Watch("in-memory", 1).all.size(), events.all.size() - 1);
  EXPECT_FALSE(std::filesystem::exists(options.state_dir));
}

TEST_F(DurableJobsTest, RunningJobCannotBeDeleted) {
  SimThread slow(WithLatency(absl::Minutes(10)));
  RestartServer({{"sim", slow.url()}});
  ASSERT_TRUE(Create(Named("busy", 2)).ok());
  grpc::ClientContext context;
  v1::DeleteJobRequest remove;
  remove.set_job_id("busy");
  google::protobuf::Empty empty;
  grpc::Status status = stub_->DeleteJob(&context, remove, &empty);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("cancel it"));
}

// gRPC ends an upload's reads the same way when the client cancels (or its
// connection breaks) as when it has sent everything. A cancelled upload
// must store nothing: before the fix its first rows were stored as the
// whole dataset under the client's id (20 of 20 tries), and a retry with
// that id was refused as ALREADY_EXISTS. The waits are bounded only so
// that a regression fails here instead of hanging.
TEST_F(DurableJobsTest, AnUploadCancelledBeforeItsEndStoresNothing) {
  const std::string upload_dir = state_dir_ + "/uploads/cut";
  {
    grpc::ClientContext context;
    v1::Dataset dataset;
    auto writer = stub_->UploadDataset(&context, &dataset);
    v1::DatasetChunk chunk;
    chunk.set_dataset_id("cut");
    chunk.set_data("{\"question\": \"a\"}\n{\"question\": \"b\"}\n");
    ASSERT_TRUE(writer->Write(chunk));
    // The server has taken the chunk: its rows are being written.
    ASSERT_TRUE(
        Eventually([&] { return std::filesystem::exists(upload_dir); }));
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // What it wrote goes: stored, it would stay.
  EXPECT_TRUE(Eventually([&] { return !std::filesystem::exists(upload_dir); }))
      << "the cancelled upload was stored";

  // The id is free again, and an upload under it stores what it was sent.
  absl::StatusOr<v1::Dataset> whole =
      Upload({"{\"question\": \"a\"}\n", "{\"question\": \"b\"}\n",
              "{\"question\": \"c\"}\n"},
             "cut");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->rows(), 3);
}

}  // namespace
}  // namespace sdg::testing
