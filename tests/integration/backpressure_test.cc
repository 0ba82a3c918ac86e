// A caller that stops reading its stream: the server stops taking that job's
// shards instead of buffering its results without bound, and resumes when
// the caller reads again.
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

class BackpressureTest : public ServiceFixture {
 protected:
  SimThread sim_;
};

TEST_F(BackpressureTest, SlowReaderPausesItsJobOnly) {
  StartServer({{"sim", sim_.url()}});
  // 400 rows of 64 KiB: far more than gRPC's flow-control windows hold.
  v1::GenerateJobRequest request = Request(0);
  request.set_job_id("slow-reader");
  request.set_batch_size(1);
  request.mutable_block()->set_prompt_template("{{text}}");
  request.mutable_block()->set_max_tokens(1);
  const std::string text(64 * 1024, 'x');
  for (int i = 0; i < 400; ++i) {
    (*request.add_rows()->mutable_fields())["text"].set_string_value(text);
  }

  grpc::ClientContext context;
  auto reader = stub_->GenerateJob(&context, request);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_started());

  // Not reading: the job stalls, unfinished.
  ASSERT_TRUE(
      Eventually([&] { return Metric("sdg_stream_stalls_total") >= 1; }));
  absl::StatusOr<v1::Job> job = GetJob("slow-reader");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_RUNNING);
  EXPECT_LT(job->rows_succeeded(), 400);

  // Meanwhile another caller's job runs to its end.
  Events other = Run(Request(5));
  EXPECT_EQ(other.Finished().state(), v1::JOB_STATE_SUCCEEDED);

  // Reading again: every row arrives.
  int rows = 0;
  v1::JobFinished finished;
  while (reader->Read(&event)) {
    rows += event.shard_result().rows_size();
    if (event.has_finished()) finished = event.finished();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(rows, 400);
  EXPECT_EQ(finished.state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace sdg::testing
