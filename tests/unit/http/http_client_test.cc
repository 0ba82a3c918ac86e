// The event loop's timers, the text of a failed connection and the
// connections kept open per server; transfers are covered against llmsim by
// the backend and integration tests.
#include "server/http/http_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "tests/testing/eventually.h"
#include "tests/testing/sim_thread.h"

namespace sdg {
namespace {

class HttpClientTimersTest : public ::testing::Test {
 protected:
  std::unique_ptr<HttpClient> http_ = *HttpClient::Create({});
};

TEST_F(HttpClientTimersTest, TimersRunOnTheLoopThreadInDueOrder) {
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  auto record = [&](int value) {
    return [&, value] {
      absl::MutexLock lock(&mu);
      order.push_back(value);
      if (order.size() == 3) done.Notify();
    };
  };
  // Armed out of order; zero, then 20 ms, then 40 ms.
  http_->RunAfter(absl::Milliseconds(40), record(3));
  http_->RunAfter(absl::ZeroDuration(), record(1));
  http_->RunAfter(absl::Milliseconds(20), record(2));
  done.WaitForNotification();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST_F(HttpClientTimersTest, ACancelledTimerNeverRuns) {
  std::atomic<bool> cancelled_ran = false;
  absl::Notification later_ran;
  TimerService::TimerId id =
      http_->RunAfter(absl::Milliseconds(10), [&] { cancelled_ran = true; });
  http_->CancelTimer(id);
  // A later timer running proves the loop went past the cancelled one's due
  // time.
  http_->RunAfter(absl::Milliseconds(50), [&] { later_ran.Notify(); });
  later_ran.WaitForNotification();
  EXPECT_FALSE(cancelled_ran);
}

TEST_F(HttpClientTimersTest, CancelWaitsForARunningCallback) {
  absl::Notification started;
  absl::Notification returned;
  bool canceller_waited = false;  // read after `returned`
  TimerService::TimerId id = http_->RunAfter(absl::ZeroDuration(), [&] {
    started.Notify();
    // Returns only once CancelTimer below is blocked waiting for this
    // callback; without that wait it never is, and this reports false.
    canceller_waited =
        http_->AwaitCancelTimerWaitingForTesting(absl::Seconds(60));
    returned.Notify();
  });
  started.WaitForNotification();
  http_->CancelTimer(id);  // returns only after the callback has finished
  returned.WaitForNotification();
  EXPECT_TRUE(canceller_waited);
}

TEST_F(HttpClientTimersTest, ATimerMayCancelItselfFromItsCallback) {
  absl::Notification done;
  auto id = std::make_shared<std::atomic<TimerService::TimerId>>(0);
  absl::Notification armed;
  *id = http_->RunAfter(absl::Milliseconds(5), [&, id] {
    armed.WaitForNotification();
    http_->CancelTimer(*id);  // on the loop thread: must not wait for itself
    done.Notify();
  });
  armed.Notify();
  done.WaitForNotification();
}

TEST_F(HttpClientTimersTest, DestroyingTheClientDropsTimersThatHaveNotRun) {
  std::atomic<bool> ran = false;
  http_->RunAfter(absl::Hours(1), [&] { ran = true; });
  http_.reset();
  EXPECT_FALSE(ran);
}

TEST(HttpClientErrorsTest, AFailedConnectionReadsTheSameEveryTime) {
  // curl says "... port 1 after N ms: ..."; N varies from one attempt to the
  // next, and rows that failed alike must carry one message.
  std::unique_ptr<HttpClient> http = *HttpClient::Create({});
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::Notification done;
    HttpResponse response;
    HttpRequest request;
    request.url = "http://127.0.0.1:1/v1/models";
    http->Start(std::move(request), [&](HttpResponse reply) {
      response = std::move(reply);
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(response.transport.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(std::string(response.transport.message()),
              "Failed to connect to 127.0.0.1 port 1: Couldn't connect to "
              "server (http://127.0.0.1:1/v1/models)");
  }
}

// Sends `count` completions requests at once, each allowed `max_connections`,
// and waits for their replies.
void SendAndWait(HttpClient& http, const std::string& base_url, int count,
                 std::optional<int> max_connections) {
  absl::Mutex mu;
  int left = count;
  for (int i = 0; i < count; ++i) {
    HttpRequest request;
    request.url = base_url + "/completions";
    request.json_body = R"({"model":"m","prompt":"hi"})";
    request.max_connections = max_connections;
    http.Start(std::move(request), [&](HttpResponse response) {
      EXPECT_EQ(response.http_code, 200) << response.transport;
      absl::MutexLock lock(&mu);
      --left;
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](int* left) { return *left == 0; }, &left));
}

TEST(HttpClientConnectionsTest, ALoweredCapClosesTheConnectionsAboveIt) {
  testing::SimThread sim(testing::WithLatency(absl::Milliseconds(50)));
  std::unique_ptr<HttpClient> http = *HttpClient::Create({});
  SendAndWait(*http, sim.url(), 4, 4);  // four busy at once: four opened
  EXPECT_EQ(sim.Stats()["max_connections_open"], 4);
  EXPECT_EQ(sim.Stats()["connections_open"], 4);  // idle, kept alive

  // Now one at a time under a cap of one: each request past the cap closes
  // the connection it used, until one is left, which is kept.
  for (int i = 0; i < 5; ++i) SendAndWait(*http, sim.url(), 1, 1);
  EXPECT_TRUE(testing::Eventually([&] {
    return sim.Stats()["connections_open"] == 1;
  })) << sim.Stats().dump();
  EXPECT_EQ(sim.Stats()["max_connections_open"], 4);
}

TEST(HttpClientConnectionsTest, RequestsInFlightUnderACapOpenNoMoreThanIt) {
  testing::SimThread sim(testing::WithLatency(absl::Milliseconds(20)));
  std::unique_ptr<HttpClient> http = *HttpClient::Create({});
  for (int round = 0; round < 5; ++round) {
    SendAndWait(*http, sim.url(), 2, 2);
  }
  EXPECT_EQ(sim.Stats()["max_connections_open"], 2);
}

}  // namespace
}  // namespace sdg
