#include "tests/testing/test_postgres.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/store/postgres.h"
#include "tests/testing/subprocess.h"

namespace sdg::testing {
namespace {

// Stops, at exit, the server this process started.
struct OwnCluster {
  std::string state_file;
  ~OwnCluster() {
    RunCommand({SDG_PG_CLUSTER, "stop", state_file});
    std::remove(state_file.c_str());
  }
};

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "TestPostgres: %s\n", why.c_str());
  std::abort();
}

}  // namespace

TestPostgres& TestPostgres::Get() {
  static TestPostgres* const server = [] {
    auto* postgres = new TestPostgres();
    const char* shared = std::getenv("SDG_TEST_POSTGRES");
    if (shared != nullptr && *shared != '\0') {
      postgres->state_file_ = shared;
    } else {
      static OwnCluster own;
      char path[] = "/tmp/sdg-pg-state.XXXXXX";
      const int fd = mkstemp(path);
      if (fd < 0) Fail("mkstemp failed");
      close(fd);
      own.state_file = path;
      CommandResult started = RunCommand({SDG_PG_CLUSTER, "start", path});
      if (started.exit_code != 0) {
        Fail(absl::StrCat("pg_cluster.sh start failed: ", started.err));
      }
      postgres->state_file_ = path;
    }
    std::ifstream in(postgres->state_file_);
    std::string line;
    while (std::getline(in, line)) {
      if (absl::StartsWith(line, "PGPORT=")) {
        (void)absl::SimpleAtoi(line.substr(7), &postgres->port_);
      } else if (absl::StartsWith(line, "PGPASSWORD=")) {
        postgres->password_ = line.substr(11);
      }
    }
    if (postgres->port_ == 0) {
      Fail(absl::StrCat("no PGPORT in ", postgres->state_file_,
                        " (did the postgres fixture start?)"));
    }
    return postgres;
  }();
  return *server;
}

std::string TestPostgres::Conninfo(const std::string& database,
                                   bool password) const {
  std::string conninfo =
      absl::StrCat("host=127.0.0.1 port=", port_, " user=sdg dbname=", database,
                   " connect_timeout=10");
  if (password) absl::StrAppend(&conninfo, " password=", password_);
  return conninfo;
}

absl::StatusOr<std::string> TestPostgres::Database(const std::string& name,
                                                   bool password) {
  absl::StatusOr<std::unique_ptr<pg::Connection>> admin =
      pg::Connection::Open(Conninfo("postgres", true));
  if (!admin.ok()) return admin.status();
  absl::StatusOr<pg::Result> exists =
      (*admin)->Exec("SELECT 1 FROM pg_database WHERE datname = $1",
                     pg::Params().Text(name), "looking for a database");
  if (!exists.ok()) return exists.status();
  if (exists->rows() == 0) {
    // Names here are the tests' own ([a-z0-9_]).
    absl::StatusOr<pg::Result> created = (*admin)->Exec(
        absl::StrCat("CREATE DATABASE ", name), "creating a database");
    if (!created.ok()) return created.status();
  }
  return Conninfo(name, password);
}

absl::Status TestPostgres::DropDatabase(const std::string& name) {
  absl::StatusOr<std::unique_ptr<pg::Connection>> admin =
      pg::Connection::Open(Conninfo("postgres", true));
  if (!admin.ok()) return admin.status();
  return (*admin)
      ->Exec(absl::StrCat("DROP DATABASE IF EXISTS ", name, " WITH (FORCE)"),
             "dropping a database")
      .status();
}

}  // namespace sdg::testing
