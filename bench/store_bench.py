#!/usr/bin/python3
"""The PostgreSQL store against the embedded SQLite one, side by side: the
same sdgd binary, one replica, on the same nginx, llmsim and machine, each
scenario run on SQLite, then PostgreSQL, ROUNDS times; medians and their
ratio. PostgreSQL is a throwaway cluster (tests/testing/pg_cluster.sh) on
a free loopback port, a new database for each sdgd start, as SQLite gets a
new state_dir. For PostgreSQL it also reports what the database saw, from
pg_stat_database: transactions committed per second (sdgd's start and the upload
included) and the job's rows per transaction.

  bench/store_bench.py --build build/release [--rounds 3] [--only NAME]

sdgd's CPU per row excludes PostgreSQL's own processes (and SQLite's work
is inside sdgd): compare rows/s, not CPU.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_CLUSTER = os.path.join(ROOT, "tests/testing/pg_cluster.sh")

# The batched zero-latency scenarios (commits are the bottleneck) and 256
# one-row shards in flight against 50 ms (the backend is).
SCENARIOS = ["chat 0ms, batch 8", "completions 0ms, 8/request",
             "chat 50ms, batch 1"]


class Postgres:
    """A throwaway cluster: started here, stopped (by pg_ctl) at close."""

    def __init__(self, work):
        self.state = os.path.join(work, "pg.state")
        subprocess.run([PG_CLUSTER, "start", self.state], check=True)
        values = dict(line.split("=", 1) for line in
                      open(self.state).read().splitlines())
        self.port, self.password = values["PGPORT"], values["PGPASSWORD"]
        self.databases = 0

    def sql(self, database, statement):
        env = dict(os.environ, PGPASSWORD=self.password)
        done = subprocess.run(
            [PG_CLUSTER, "psql", self.state, "-h", "127.0.0.1", "-p",
             self.port, "-U", "sdg", "-d", database, "-At", "-v",
             "ON_ERROR_STOP=1", "-c", statement],
            env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def new_database(self):
        self.databases += 1
        name = f"bench_{self.databases}"
        self.sql("postgres", f"CREATE DATABASE {name}")
        return name

    def url(self, database):
        return (f"postgresql://sdg:{self.password}@127.0.0.1:{self.port}/"
                f"{database}")

    def commits(self, database):
        """Transactions committed in `database`. Exact only once the
        sessions that wrote are gone: a session reports its counters at
        most once a second, and when it ends."""
        return int(self.sql(
            database, "SELECT xact_commit FROM pg_stat_database "
            "WHERE datname = current_database()"))

    def close(self):
        subprocess.run([PG_CLUSTER, "stop", self.state], check=False)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="one scenario's name")
    args = parser.parse_args()
    sdgd = os.path.join(args.build, "server/sdgd")
    work = tempfile.mkdtemp(prefix="sdg-store-bench-")
    bench = ab_bench.AbBench(args.build, work, perf=False)
    postgres = None
    figures = {}
    database_load = {}
    try:
        postgres = Postgres(work)
        bench.start_nginx()
        bench.sim0 = bench.start_llmsim()
        # Each scenario on an sdgd of its own, so that the database's
        # counters, read after that sdgd stopped, are the scenario's.
        for _ in range(args.rounds):
            for name in SCENARIOS:
                if args.only and args.only != name:
                    continue
                backend, rows, api, batch, workers, context = (
                    ab_bench.SCENARIOS[name])
                for store in ("SQLite", "PostgreSQL"):
                    flags = []
                    database = None
                    if store == "PostgreSQL":
                        database = postgres.new_database()
                        url_file = os.path.join(work, f"{database}.url")
                        with open(url_file, "w") as f:
                            f.write(postgres.url(database) + "\n")
                        flags.append(f"--store_url_file={url_file}")
                    bench.start_sdgd_binary(sdgd, flags)
                    bench.sdgctl(f"{name} [{store}]", backend, rows, api,
                                 batch, workers, context_bytes=context)
                    bench.stop_sdgd()
                    result = bench.results[-1]
                    figures.setdefault((name, store), []).append(
                        result["rows_per_s"])
                    if database:
                        commits = postgres.commits(database)
                        database_load.setdefault(name, []).append(
                            (commits / result["seconds"], rows / commits))
    finally:
        bench.stop()
        if postgres is not None:
            postgres.close()
    print()
    print("| scenario | SQLite rows/s | PostgreSQL rows/s | PostgreSQL ÷ "
          "SQLite | PostgreSQL transactions/s | rows per transaction |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in SCENARIOS:
        if (name, "SQLite") not in figures:
            continue
        sqlite = statistics.median(figures[(name, "SQLite")])
        pg = statistics.median(figures[(name, "PostgreSQL")])
        per_second = statistics.median(t for t, _ in database_load[name])
        per_commit = statistics.median(r for _, r in database_load[name])
        print(f"| {name} | {sqlite:,.0f} | {pg:,.0f} | {pg / sqlite:.2f}× "
              f"| {per_second:,.0f} | {per_commit:,.1f} |")


if __name__ == "__main__":
    sys.exit(main())
