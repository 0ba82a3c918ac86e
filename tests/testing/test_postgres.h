// The PostgreSQL server the tests use: the one ctest's `postgres` fixture
// started (SDG_TEST_POSTGRES names tests/testing/pg_cluster.sh's state
// file), or else one this process starts with pg_cluster.sh and stops when
// it exits. Never the machine's own cluster.
#ifndef SDG_TESTS_TESTING_TEST_POSTGRES_H_
#define SDG_TESTS_TESTING_TEST_POSTGRES_H_

#include <string>

#include "absl/status/statusor.h"

namespace sdg::testing {

class TestPostgres {
 public:
  // The server, started on first use; aborts the test binary, saying why,
  // if it cannot start.
  static TestPostgres& Get();

  // A conninfo for database `name`, created (empty) if missing. With
  // `password` false, the password is left out (for the tests of where it
  // comes from).
  absl::StatusOr<std::string> Database(const std::string& name,
                                       bool password = true);
  // Drops database `name` (its connections are ended first).
  absl::Status DropDatabase(const std::string& name);
  std::string Conninfo(const std::string& database, bool password) const;

  int port() const { return port_; }
  const std::string& password() const { return password_; }
  // pg_cluster.sh's state file.
  const std::string& state_file() const { return state_file_; }

 private:
  TestPostgres() = default;
  std::string state_file_;
  int port_ = 0;
  std::string password_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_TEST_POSTGRES_H_
