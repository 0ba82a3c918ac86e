// The PostgreSQL servers the tests use, run by tests/testing/pg_cluster.sh
// (initdb and pg_ctl in a temporary directory, a free loopback port; never
// the machine's own cluster). Shared: the one ctest's `postgres` fixture
// started (SDG_TEST_POSTGRES names its state file), or else one this process
// starts and stops when it exits. Private: one a test starts for itself, to
// stop and start under a running job. Databases are made with psql, so that
// tests of processes link no sdgd code.
#ifndef SDG_TESTS_TESTING_TEST_POSTGRES_H_
#define SDG_TESTS_TESTING_TEST_POSTGRES_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sdg::testing {

class TestPostgres {
 public:
  // The shared server, started on first use; aborts the test binary, saying
  // why, if it cannot start.
  static TestPostgres& Shared();
  // A server of the caller's own, stopped and removed when it goes. With
  // `tls`, it serves TLS with a certificate for `localhost` signed by
  // tls_ca().
  static absl::StatusOr<std::unique_ptr<TestPostgres>> StartPrivate(
      bool tls = false);
  TestPostgres(const TestPostgres&) = delete;
  TestPostgres& operator=(const TestPostgres&) = delete;
  ~TestPostgres();

  // A conninfo for database `name`, created (empty) if missing. With
  // `password` false, the password is left out.
  absl::StatusOr<std::string> Database(const std::string& name,
                                       bool password = true);
  // Drops database `name` (its connections are ended first).
  absl::Status DropDatabase(const std::string& name);
  // Runs SQL in database `name` with psql; its output, unaligned.
  absl::StatusOr<std::string> Query(const std::string& name,
                                    const std::string& sql);
  std::string Conninfo(const std::string& database, bool password) const;
  // The same as a postgresql:// URL (what --store_url_file holds).
  std::string Url(const std::string& database) const;

  // The server stops (pg_ctl -m fast) and starts again on the same port:
  // a database outage and its end.
  absl::Status Pause();
  absl::Status Resume();

  int port() const { return port_; }
  const std::string& password() const { return password_; }
  // With TLS: the CA that signed the server's certificate, and a CA that
  // signed nothing this server has.
  const std::string& tls_ca() const { return tls_ca_; }
  const std::string& other_ca() const { return other_ca_; }

 private:
  TestPostgres() = default;
  // Reads the port and password from the state file.
  absl::Status ReadState();
  absl::Status Cluster(const std::string& command);

  std::string state_file_;
  bool owned_ = false;  // started here: stopped by the destructor
  int port_ = 0;
  std::string password_;
  std::string tls_ca_;
  std::string other_ca_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_TEST_POSTGRES_H_
