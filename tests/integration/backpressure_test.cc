// A caller that stops reading its stream does not hold up its job: events go
// to the job's log, the job runs to its end, and the caller reads every
// event when it reads again.
#include <gtest/gtest.h>

#include "tests/integration/service_fixture.h"

namespace sdg::testing {
namespace {

class BackpressureTest : public ServiceFixture {
 protected:
  SimThread sim_;
};

TEST_F(BackpressureTest, SlowReaderDoesNotHoldUpItsJob) {
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

  // Not reading: the job still runs to its end.
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<v1::Job> job = GetJob("slow-reader");
    return job.ok() && job->state() == v1::JOB_STATE_SUCCEEDED;
  }));
  EXPECT_EQ(GetJob("slow-reader")->rows_succeeded(), 400);

  // Reading again: every row arrives, in sequence.
  int rows = 0;
  uint64_t last_sequence = event.sequence();
  v1::JobFinished finished;
  while (reader->Read(&event)) {
    EXPECT_EQ(event.sequence(), last_sequence + 1);
    last_sequence = event.sequence();
    rows += event.shard_result().rows_size();
    if (event.has_finished()) finished = event.finished();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(rows, 400);
  EXPECT_EQ(finished.state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace sdg::testing
