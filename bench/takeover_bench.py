#!/usr/bin/python3
"""How long a job stops when its active replica goes: two sdgd replicas on
one PostgreSQL store (a throwaway cluster, tests/testing/pg_cluster.sh), a
job running on the active one, which is then killed (SIGKILL) or stopped
(SIGTERM, --shutdown_grace=0s). Measured from the signal, by one psql
session polling the database every few milliseconds:
  - lease: until the standby holds the replica lease (its epoch moves);
  - commit: until the job's next event is committed, necessarily by the
    standby (the old replica has exited by then).
After SIGKILL the standby waits for the lease to expire, so both are about
--replica_lease (the lease was renewed at most a third of it before the
kill); after SIGTERM the lease is released at once. Medians of ROUNDS.

  bench/takeover_bench.py --build build/release [--rounds 3] [--lease 5s]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import Postgres, PG_CLUSTER  # noqa: E402

ROWS = 20000


def wait_for_line(path, text, proc, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(path) as f:
            for line in f:
                if text in line:
                    return line.strip()
        if proc.poll() is not None:
            sys.exit(f"{proc.args[0]} exited ({proc.returncode}); see {path}")
        time.sleep(0.02)
    sys.exit(f"no '{text}' in {path} after {seconds} s")


class Poller:
    """One psql session: the lease's epoch and the job's last committed
    sequence, a query at a time."""

    def __init__(self, postgres, database):
        env = dict(os.environ, PGPASSWORD=postgres.password)
        self.proc = subprocess.Popen(
            [PG_CLUSTER, "psql", postgres.state, "-h", "127.0.0.1", "-p",
             postgres.port, "-U", "sdg", "-d", database, "-At", "-q"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, bufsize=1)

    def read(self):
        self.proc.stdin.write(
            "SELECT (SELECT epoch FROM sdg_replica_lease) || ' ' || "
            "(SELECT coalesce(max(sequence), 0) FROM job_events);\n")
        self.proc.stdin.flush()
        epoch, sequence = self.proc.stdout.readline().split()
        return int(epoch), int(sequence)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def one_round(args, work, postgres, llmsim_port, kind, round_index):
    database = postgres.new_database()
    url_file = os.path.join(work, f"{database}.url")
    with open(url_file, "w") as f:
        f.write(postgres.url(database) + "\n")
    sdgd = os.path.join(args.build, "server/sdgd")
    flags = [f"--backend=sim=http://127.0.0.1:{llmsim_port}/v1",
             f"--store_url_file={url_file}", f"--replica_lease={args.lease}",
             "--shutdown_grace=0s", "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0"]
    replicas = []
    try:
        for name in ("a", "b"):
            log = os.path.join(work, f"{kind}-{round_index}-{name}.log")
            out = open(log, "w")
            replicas.append((subprocess.Popen([sdgd] + flags, stdout=out,
                                              stderr=subprocess.STDOUT), log))
            wait_for_line(log, "sdgd listening on" if name == "a"
                          else "standby: another replica", replicas[-1][0])
        active, active_log = replicas[0]
        port = wait_for_line(active_log, "sdgd listening on",
                             active).rsplit(":", 1)[1]
        subprocess.run(
            [os.path.join(args.build, "client/sdgctl"), "submit",
             f"--server=127.0.0.1:{port}", f"--input={args.rows_file}",
             "--template=Q {{question}}", "--model=sim-model",
             "--num_workers=16", "--max_tokens=8"],
            check=True, capture_output=True)
        poller = Poller(postgres, database)
        epoch, sequence = poller.read()
        while sequence < 200:  # the job is running and committing
            time.sleep(0.01)
            epoch, sequence = poller.read()
        signalled = time.monotonic()
        active.send_signal(signal.SIGKILL if kind == "SIGKILL"
                           else signal.SIGTERM)
        active.wait()
        # Whatever the old replica committed, it committed before it exited.
        _, sequence = poller.read()
        lease_at = commit_at = None
        while commit_at is None:
            now_epoch, now_sequence = poller.read()
            now = time.monotonic() - signalled
            if lease_at is None and now_epoch != epoch:
                lease_at = now
            if now_sequence > sequence:
                commit_at = now
            if now > 120:
                sys.exit(f"{kind}: no commit 120 s after the signal")
            time.sleep(0.002)
        poller.close()
        return lease_at, commit_at
    finally:
        for proc, _ in replicas:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", default="5s")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sdg-takeover-bench-")
    args.rows_file = os.path.join(work, "rows.jsonl")
    with open(args.rows_file, "w") as f:
        for i in range(ROWS):
            f.write(json.dumps({"id": i, "question": f"What is {i}?"}) + "\n")
    postgres = Postgres(work)
    llmsim = None
    figures = {}
    try:
        llmsim_log = os.path.join(work, "llmsim.log")
        llmsim = subprocess.Popen(
            [os.path.join(args.build, "tools/llmsim/llmsim"),
             "--listen=127.0.0.1:0", "--model=sim-model", "--latency_ms=20"],
            stdout=open(llmsim_log, "w"), stderr=subprocess.STDOUT)
        llmsim_port = wait_for_line(llmsim_log, "llmsim listening on",
                                    llmsim).rsplit(":", 1)[1]
        for round_index in range(args.rounds):
            for kind in ("SIGKILL", "SIGTERM"):
                lease, commit = one_round(args, work, postgres, llmsim_port,
                                          kind, round_index)
                print(f"{kind} round {round_index + 1}: lease taken after "
                      f"{lease:.2f} s, next commit after {commit:.2f} s",
                      flush=True)
                figures.setdefault(kind, []).append((lease, commit))
    finally:
        if llmsim is not None:
            llmsim.kill()
            llmsim.wait()
        postgres.close()
    print()
    print(f"| the active replica | lease taken (median) | next commit "
          f"(median) | --replica_lease |")
    print("|---|---:|---:|---:|")
    for kind, rows in figures.items():
        lease = statistics.median(r[0] for r in rows)
        commit = statistics.median(r[1] for r in rows)
        print(f"| {kind} | {lease:.2f} s | {commit:.2f} s | {args.lease} |")


if __name__ == "__main__":
    main()
