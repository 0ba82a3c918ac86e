// llmsim in this process, on a thread of its own: for unit and integration
// tests that talk real HTTP to it.
#ifndef SDG_TESTS_TESTING_SIM_THREAD_H_
#define SDG_TESTS_TESTING_SIM_THREAD_H_

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "tests/testing/http_get.h"
#include "tools/llmsim/sim_server.h"

namespace sdg::testing {

// llmsim options with every reply delayed by `latency`.
inline llmsim::SimServer::Options WithLatency(absl::Duration latency) {
  llmsim::SimServer::Options options;
  options.latency_ms = static_cast<int>(absl::ToInt64Milliseconds(latency));
  return options;
}

// An llmsim server on its own (owned, joined) thread.
class SimThread {
 public:
  // The model is "m" unless `options` names another.
  explicit SimThread(llmsim::SimServer::Options options = {}) {
    if (options.model == llmsim::SimServer::Options().model)
      options.model = "m";
    server_ = *llmsim::SimServer::Create(options);
    thread_ = std::thread([this] { server_->Run(); });
  }
  ~SimThread() {
    server_->Stop();
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + "/v1";
  }
  llmsim::SimServer& server() { return *server_; }
  // llmsim's /stats.
  nlohmann::json Stats() const {
    auto body = HttpGet("http://127.0.0.1:" + std::to_string(server_->port()) +
                        "/stats");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? nlohmann::json::parse(*body) : nlohmann::json::object();
  }

 private:
  std::unique_ptr<llmsim::SimServer> server_;
  std::thread thread_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_SIM_THREAD_H_
