#include "tests/testing/test_postgres.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/subprocess.h"

namespace sdg::testing {
namespace {

absl::StatusOr<std::string> NewStateFile() {
  char path[] = "/tmp/sdg-pg-state.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  close(fd);
  return std::string(path);
}

}  // namespace

TestPostgres& TestPostgres::Shared() {
  static TestPostgres* const server = [] {
    const char* shared = std::getenv("SDG_TEST_POSTGRES");
    absl::StatusOr<std::unique_ptr<TestPostgres>> postgres;
    if (shared != nullptr && *shared != '\0') {
      postgres = std::unique_ptr<TestPostgres>(new TestPostgres());
      (*postgres)->state_file_ = shared;
      if (absl::Status s = (*postgres)->ReadState(); !s.ok()) {
        postgres = s;
      }
    } else {
      postgres = StartPrivate();
    }
    if (!postgres.ok()) {
      std::fprintf(stderr, "TestPostgres: %s\n",
                   std::string(postgres.status().message()).c_str());
      std::abort();
    }
    // Lives until exit; a server it started stops then.
    static std::unique_ptr<TestPostgres> keep = *std::move(postgres);
    return keep.get();
  }();
  return *server;
}

absl::StatusOr<std::unique_ptr<TestPostgres>> TestPostgres::StartPrivate(
    bool tls) {
  absl::StatusOr<std::string> state = NewStateFile();
  if (!state.ok()) return state.status();
  std::unique_ptr<TestPostgres> postgres(new TestPostgres());
  postgres->state_file_ = *state;
  postgres->owned_ = true;
  if (absl::Status s = postgres->Cluster(tls ? "start-tls" : "start");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = postgres->ReadState(); !s.ok()) return s;
  return postgres;
}

TestPostgres::~TestPostgres() {
  if (!owned_) return;
  (void)Cluster("stop");
  std::remove(state_file_.c_str());
}

absl::Status TestPostgres::Cluster(const std::string& command) {
  CommandResult result = RunCommand({SDG_PG_CLUSTER, command, state_file_});
  if (result.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("pg_cluster.sh ", command, " failed: ", result.err));
  }
  return absl::OkStatus();
}

absl::Status TestPostgres::ReadState() {
  std::ifstream in(state_file_);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "PGPORT=")) {
      (void)absl::SimpleAtoi(line.substr(7), &port_);
    } else if (absl::StartsWith(line, "PGPASSWORD=")) {
      password_ = line.substr(11);
    } else if (absl::StartsWith(line, "PGSSLROOTCERT=")) {
      tls_ca_ = line.substr(14);
    } else if (absl::StartsWith(line, "OTHER_CA=")) {
      other_ca_ = line.substr(9);
    }
  }
  if (port_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no PGPORT in ", state_file_, " (did the postgres fixture start?)"));
  }
  return absl::OkStatus();
}

absl::Status TestPostgres::Pause() { return Cluster("pause"); }
absl::Status TestPostgres::Resume() { return Cluster("resume"); }

std::string TestPostgres::Conninfo(const std::string& database,
                                   bool password) const {
  std::string conninfo =
      absl::StrCat("host=127.0.0.1 port=", port_, " user=sdg dbname=", database,
                   " connect_timeout=10");
  if (password) absl::StrAppend(&conninfo, " password=", password_);
  return conninfo;
}

std::string TestPostgres::Url(const std::string& database) const {
  // pg_cluster.sh's passwords are letters and digits: nothing to escape.
  return absl::StrCat("postgresql://sdg:", password_, "@127.0.0.1:", port_, "/",
                      database, "?connect_timeout=10");
}

absl::StatusOr<std::string> TestPostgres::Query(const std::string& name,
                                                const std::string& sql) {
  CommandResult result =
      RunCommand({SDG_PG_CLUSTER, "psql", state_file_, Conninfo(name, true),
                  "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql});
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat("psql: ", result.err));
  }
  return result.out;
}

absl::StatusOr<std::string> TestPostgres::Database(const std::string& name,
                                                   bool password) {
  // Names here are the tests' own ([a-z0-9_]).
  absl::StatusOr<std::string> exists =
      Query("postgres",
            absl::StrCat("SELECT count(*) FROM pg_database WHERE datname = '",
                         name, "'"));
  if (!exists.ok()) return exists.status();
  if (absl::StartsWith(*exists, "0")) {
    absl::StatusOr<std::string> created =
        Query("postgres", absl::StrCat("CREATE DATABASE ", name));
    if (!created.ok()) return created.status();
  }
  return Conninfo(name, password);
}

absl::Status TestPostgres::DropDatabase(const std::string& name) {
  return Query("postgres",
               absl::StrCat("DROP DATABASE IF EXISTS ", name, " WITH (FORCE)"))
      .status();
}

}  // namespace sdg::testing
