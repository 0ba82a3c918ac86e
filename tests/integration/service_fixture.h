// Shared by the integration tests: the sdgd service in-process, llmsim HTTP
// servers on their own threads, and a reader of GenerateJob streams.
#ifndef SDG_TESTS_INTEGRATION_SERVICE_FIXTURE_H_
#define SDG_TESTS_INTEGRATION_SERVICE_FIXTURE_H_

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/message_differencer.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/free_port.h"
#include "tests/testing/http_get.h"
#include "tests/testing/sim_thread.h"
#include "tests/testing/subprocess.h"
#include "tools/llmsim/sim_server.h"

namespace sdg::testing {

// Threads of this process named `name` (sdgd names its own: sdg-worker,
// sdg-loop); gRPC's pool grows and shrinks on its own and is not counted.
inline int ThreadCount(const std::string& name) {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::string comm =
          ReadFile(std::string("/proc/self/task/") + entry->d_name + "/comm");
      count += comm == name + "\n";
    }
    closedir(dir);
  }
  return count;
}

struct Events {
  std::vector<v1::JobEvent> all;
  grpc::Status status;

  std::vector<v1::ResultRow> Rows() const {
    std::vector<v1::ResultRow> rows;
    for (const auto& event : all) {
      for (const auto& row : event.shard_result().rows()) rows.push_back(row);
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return std::pair(a.row_index(), a.sample_index()) <
             std::pair(b.row_index(), b.sample_index());
    });
    return rows;
  }
  std::vector<v1::ShardError> Errors() const {
    std::vector<v1::ShardError> errors;
    for (const auto& event : all) {
      if (event.has_shard_error()) errors.push_back(event.shard_error());
    }
    return errors;
  }
  v1::JobFinished Finished() const {
    if (all.empty() || !all.back().has_finished()) {
      ADD_FAILURE() << "the stream did not end with `finished`";
      return {};
    }
    return all.back().finished();
  }
};

// gRPC and absl share the canonical code numbering.
inline absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// Equal events (a row's columns are a map: its bytes are not comparable).
inline bool SameEvent(const v1::JobEvent& a, const v1::JobEvent& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// Reads a GenerateJob call to its end.
inline Events ReadAll(v1::GenerationService::Stub& stub,
                      const v1::GenerateJobRequest& request,
                      grpc::ClientContext* context) {
  Events events;
  auto reader = stub.GenerateJob(context, request);
  v1::JobEvent event;
  while (reader->Read(&event)) events.all.push_back(event);
  events.status = reader->Finish();
  return events;
}

// A GenerateJob call read to its end on a thread of its own, for tests that
// act while it runs. Destroying it cancels the call and joins the thread, so
// a failed ASSERT in the test body returns cleanly instead of terminating
// the process with a joinable thread (and losing the report).
class BackgroundCall {
 public:
  BackgroundCall(v1::GenerationService::Stub& stub,
                 v1::GenerateJobRequest request)
      : thread_([this, &stub, request = std::move(request)] {
          events_ = ReadAll(stub, request, &context_);
        }) {}
  ~BackgroundCall() {
    if (thread_.joinable()) {
      context_.TryCancel();
      thread_.join();
    }
  }
  // Thread-safe: TryCancel() may be called while the call runs.
  grpc::ClientContext& context() { return context_; }
  // Waits for the call to end and returns what it read.
  Events Wait() {
    thread_.join();
    return std::move(events_);
  }

 private:
  grpc::ClientContext context_;
  Events events_;       // written by thread_ until it is joined
  std::thread thread_;  // last: starts once the rest exists
};

class ServiceFixture : public ::testing::Test {
 protected:
  // Stops the server before the derived fixture's llmsim servers go.
  void TearDown() override { server_.reset(); }

  // backends: NAME -> base URL; the first is the default.
  void StartServer(
      const std::vector<std::pair<std::string, std::string>>& backends,
      ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    if (options.scheduler.max_workers == 64) options.scheduler.max_workers = 8;
    // The durable default, in a directory of this server's own.
    if (options.state_dir == ServerOptions().state_dir) {
      state_dir_ = MakeTempDir() + "/state";
      options.state_dir = state_dir_;
    }
    for (const auto& [name, url] : backends) {
      BackendOptions backend = backend_defaults_;
      backend.name = name;
      backend.base_urls = absl::StrSplit(url, ',');
      options.backends.push_back(backend);
    }
    auto server = Server::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::GenerationService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                            grpc::InsecureChannelCredentials()));
  }

  // Stops the server (as SIGTERM does, with no grace) and starts another on
  // the same state_dir: what a restart looks like to the jobs.
  void RestartServer(
      const std::vector<std::pair<std::string, std::string>>& backends,
      ServerOptions options = {}) {
    server_.reset();
    options.state_dir = state_dir_;
    StartServer(backends, options);
  }

  static v1::GenerateJobRequest Request(int rows,
                                        const std::string& backend = "") {
    v1::GenerateJobRequest request;
    request.mutable_block()->set_model("m");
    request.mutable_block()->set_backend(backend);
    request.mutable_block()->set_prompt_template("Q{{id}}: {{question}}");
    for (int i = 0; i < rows; ++i) {
      google::protobuf::Struct* row = request.add_rows();
      (*row->mutable_fields())["id"].set_number_value(i);
      (*row->mutable_fields())["question"].set_string_value("why " +
                                                            std::to_string(i));
    }
    request.set_batch_size(3);
    request.set_num_workers(4);
    return request;
  }

  Events Run(const v1::GenerateJobRequest& request,
             grpc::ClientContext* context = nullptr) {
    grpc::ClientContext own_context;
    return ReadAll(*stub_, request, context ? context : &own_context);
  }
  std::unique_ptr<BackgroundCall> RunInBackground(
      v1::GenerateJobRequest request) {
    return std::make_unique<BackgroundCall>(*stub_, std::move(request));
  }

  absl::StatusOr<v1::Job> GetJob(const std::string& id) {
    grpc::ClientContext context;
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    grpc::Status status = stub_->GetJob(&context, request, &job);
    if (!status.ok()) return FromGrpc(status);
    return job;
  }

  absl::StatusOr<v1::Job> CancelJob(const std::string& id) {
    grpc::ClientContext context;
    v1::CancelJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    grpc::Status status = stub_->CancelJob(&context, request, &job);
    if (!status.ok()) return FromGrpc(status);
    return job;
  }

  double Metric(const std::string& name_with_labels) {
    return MetricValue(server_->metrics().Serialize(), name_with_labels);
  }

  // Options of every backend StartServer configures. One request per row
  // unless a test turns batching on, so request counts equal row counts.
  static BackendOptions DefaultBackendOptions() {
    BackendOptions backend;
    backend.batching = BatchingMode::kOff;
    backend.retry.initial_backoff = absl::Milliseconds(10);
    return backend;
  }

  BackendOptions backend_defaults_ = DefaultBackendOptions();
  std::string state_dir_;  // the running server's
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::GenerationService::Stub> stub_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_INTEGRATION_SERVICE_FIXTURE_H_
