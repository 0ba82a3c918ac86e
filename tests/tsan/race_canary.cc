// A deliberate data race inside a gRPC reactor callback, run only in the
// ThreadSanitizer build (tests/tsan/expect_race.sh): it proves that the
// suppressions in suppressions.txt, which name gRPC's own frames, do not hide
// a race in our code that runs under them. If a suppression ever grows to
// cover our reactor callbacks, this test fails.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "sdg/v1/generation.grpc.pb.h"

namespace {

// Written without synchronization by a reactor callback and by another
// thread: the race ThreadSanitizer must report.
int unguarded_counter = 0;

class OneEventReactor final
    : public grpc::ServerWriteReactor<sdg::v1::JobEvent> {
 public:
  OneEventReactor() {
    event_.set_job_id("canary");
    StartWrite(&event_);
  }
  void OnWriteDone(bool /*ok*/) override {
    ++unguarded_counter;  // the racy access, on a gRPC callback thread
    Finish(grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  sdg::v1::JobEvent event_;
};

class CanaryService final : public sdg::v1::GenerationService::CallbackService {
  grpc::ServerWriteReactor<sdg::v1::JobEvent>* GenerateJob(
      grpc::CallbackServerContext*,
      const sdg::v1::GenerateJobRequest*) override {
    return new OneEventReactor();
  }
};

}  // namespace

int main() {
  CanaryService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 2;

  // Started before the call and joined after it: nothing orders its write
  // with the reactor's.
  std::thread other([] { ++unguarded_counter; });

  auto stub = sdg::v1::GenerationService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto reader = stub->GenerateJob(&context, sdg::v1::GenerateJobRequest());
  sdg::v1::JobEvent event;
  while (reader->Read(&event)) {
  }
  grpc::Status status = reader->Finish();
  other.join();
  server->Shutdown();
  std::printf("canary call ended: %d, counter %d\n",
              static_cast<int>(status.error_code()), unguarded_counter);
  return 0;
}
