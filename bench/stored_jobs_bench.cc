// What finished jobs in the store cost: detached one-row jobs are created
// through CreateJob by 16 client threads against llmsim, and then GetJob, a
// ListJobs page of 100 and CreateJob are timed with few jobs stored and
// with many. A second run on the same state_dir times the start-up (from
// Server::Create to listening), the memory the stored jobs take, and the
// same calls again. Prints one JSON object per phase.
//   stored_jobs_bench populate STATE_DIR JOBS
//   stored_jobs_bench restart STATE_DIR
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "server/server.h"
#include "tools/llmsim/sim_server.h"

namespace sdg {
namespace {

constexpr int kClientThreads = 16;
constexpr int kTimedCalls = 200;

using Stub = v1::GenerationService::Stub;

// This process's resident memory in bytes, from /proc.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::string value = line.substr(6);
      value.erase(std::remove(value.begin(), value.end(), ' '), value.end());
      value.erase(value.find("kB"));
      if (absl::SimpleAtoi(value, &kb)) return kb * 1024;
    }
  }
  return -1;
}

v1::GenerateJobRequest OneRowJob(const std::string& job_id) {
  v1::GenerateJobRequest request;
  request.set_job_id(job_id);
  request.set_detach(true);
  request.mutable_block()->set_model("m");
  request.mutable_block()->set_prompt_template("{{q}}");
  (*request.add_rows()->mutable_fields())["q"].set_string_value("x");
  return request;
}

bool Create(Stub& stub, const std::string& job_id) {
  grpc::ClientContext context;
  v1::Job job;
  return stub.CreateJob(&context, OneRowJob(job_id), &job).ok();
}

// Waits for the job's `finished` event.
void AwaitFinished(Stub& stub, const std::string& job_id) {
  grpc::ClientContext context;
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  auto reader = stub.WatchJob(&context, request);
  v1::JobEvent event;
  while (reader->Read(&event)) {
  }
  reader->Finish();
}

// Median milliseconds of kTimedCalls calls of `call(i)`.
template <typename Call>
double MedianMs(Call call) {
  std::vector<double> ms;
  for (int i = 0; i < kTimedCalls; ++i) {
    const absl::Time start = absl::Now();
    call(i);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Times GetJob, ListJobs and CreateJob with `stored` jobs in the store, whose
// ids are job-0 ... job-(stored-1); new jobs are named `prefix`-i.
void TimeCalls(Stub& stub, int stored, const std::string& phase,
               const std::string& prefix) {
  const double get_ms = MedianMs([&](int i) {
    grpc::ClientContext context;
    v1::GetJobRequest request;
    request.set_job_id(absl::StrCat("job-", (i * 7919) % stored));
    v1::Job job;
    stub.GetJob(&context, request, &job);
  });
  const double list_ms = MedianMs([&](int) {
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_page_size(100);
    v1::ListJobsResponse response;
    stub.ListJobs(&context, request, &response);
  });
  const double create_ms =
      MedianMs([&](int i) { Create(stub, absl::StrCat(prefix, "-", i)); });
  std::printf(
      "{\"bench\":\"stored_jobs\",\"phase\":\"%s\",\"stored_jobs\":%d,"
      "\"get_job_ms\":%.3f,\"list_jobs_100_ms\":%.3f,\"create_job_ms\":%.3f}"
      "\n",
      phase.c_str(), stored, get_ms, list_ms, create_ms);
  std::fflush(stdout);
}

struct Stack {
  std::unique_ptr<llmsim::SimServer> sim;
  std::thread sim_thread;
  std::unique_ptr<Server> server;
  std::unique_ptr<Stub> stub;
  double start_up_ms = 0;
  int64_t server_bytes = 0;
  int64_t rss_before_server = 0;  // this process before the server

  explicit Stack(const std::string& state_dir) {
    llmsim::SimServer::Options sim_options;
    sim_options.model = "m";
    sim = *llmsim::SimServer::Create(sim_options);
    sim_thread = std::thread([this] { sim->Run(); });
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.state_dir = state_dir;
    BackendOptions backend;
    backend.name = "sim";
    backend.base_urls = {absl::StrCat("http://127.0.0.1:", sim->port(), "/v1")};
    options.backends.push_back(backend);
    rss_before_server = ResidentBytes();
    const absl::Time start = absl::Now();
    server = *Server::Create(options);
    start_up_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    server_bytes = ResidentBytes() - rss_before_server;
    stub = v1::GenerationService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                            grpc::InsecureChannelCredentials()));
  }
  ~Stack() {
    server->Shutdown(absl::Seconds(5));
    server.reset();
    sim->Stop();
    sim_thread.join();
  }
};

int Populate(const std::string& state_dir, int jobs) {
  Stack stack(state_dir);
  std::atomic<int> next{0};
  const int bracket = 5000;
  int created = 0;
  while (created < jobs) {
    const int until = std::min(jobs, created + bracket);
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kClientThreads; ++t) {
      threads.emplace_back([&] {
        for (int i; (i = next.fetch_add(1)) < until;) {
          if (!Create(*stack.stub, absl::StrCat("job-", i))) {
            std::fprintf(stderr, "CreateJob job-%d failed\n", i);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    next = until;
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf(
        "{\"bench\":\"stored_jobs\",\"phase\":\"create\",\"from_jobs\":%d,"
        "\"to_jobs\":%d,\"jobs_per_s\":%.1f}\n",
        created, until, (until - created) / seconds);
    std::fflush(stdout);
    if (created == 0) {
      for (int i = 0; i < until; ++i) {
        AwaitFinished(*stack.stub, absl::StrCat("job-", i));
      }
      TimeCalls(*stack.stub, until, "few_stored", "few");
    }
    created = until;
  }
  for (int i = 0; i < jobs; ++i) {
    AwaitFinished(*stack.stub, absl::StrCat("job-", i));
  }
  TimeCalls(*stack.stub, jobs, "many_stored", "many");
  return 0;
}

int Restart(const std::string& state_dir) {
  Stack stack(state_dir);
  // Every job, counted from the pages.
  int stored = 0;
  std::string token;
  do {
    grpc::ClientContext page_context;
    v1::ListJobsRequest page;
    page.set_page_size(1000);
    page.set_page_token(token);
    v1::ListJobsResponse listed;
    if (!stack.stub->ListJobs(&page_context, page, &listed).ok()) break;
    stored += listed.jobs_size();
    token = listed.next_page_token();
  } while (!token.empty());
  // What the server holds once every job has been read (listed).
  const int64_t listed_bytes = ResidentBytes() - stack.rss_before_server;
  std::printf(
      "{\"bench\":\"stored_jobs\",\"phase\":\"restart\",\"stored_jobs\":%d,"
      "\"start_up_ms\":%.1f,\"server_rss_bytes\":%lld,\"bytes_per_job\":%.0f,"
      "\"bytes_per_job_after_listing\":%.0f}\n",
      stored, stack.start_up_ms, static_cast<long long>(stack.server_bytes),
      static_cast<double>(stack.server_bytes) / std::max(stored, 1),
      static_cast<double>(listed_bytes) / std::max(stored, 1));
  std::fflush(stdout);
  // The jobs this run creates are named after the count, so that a second
  // restart of the same state creates new ones again.
  TimeCalls(*stack.stub, stored - 2 * kTimedCalls, "after_restart",
            absl::StrCat("again", stored));
  return 0;
}

}  // namespace
}  // namespace sdg

int main(int argc, char** argv) {
  // As sdgd runs (server/main.cc).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  int jobs = 0;
  if (argc == 4 && std::string(argv[1]) == "populate" &&
      absl::SimpleAtoi(argv[3], &jobs) && jobs > 0) {
    return sdg::Populate(argv[2], jobs);
  }
  if (argc == 3 && std::string(argv[1]) == "restart") {
    return sdg::Restart(argv[2]);
  }
  std::fprintf(stderr,
               "usage: stored_jobs_bench populate STATE_DIR JOBS\n"
               "       stored_jobs_bench restart STATE_DIR\n");
  return 2;
}
