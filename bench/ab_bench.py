#!/usr/bin/python3
"""Two sdgd binaries side by side on the hot path: each scenario runs
against A, then B, then A, then B (ROUNDS times), on the same nginx and
llmsim, so that an optimisation's figure is a ratio measured in one run on
the same noisy machine. Used for each optimisation's commit message.

  bench/ab_bench.py --build build/release --a OLD_SDGD --b NEW_SDGD
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import backend_bench  # noqa: E402

SCENARIOS = {
    # name: (backend, rows, api, batch_size, num_workers, row context bytes)
    "chat 0ms, batch 8": ("echo0", 100000, "chat", 8, 32, 0),
    "chat 0ms, batch 1": ("echo0", 50000, "chat", 1, 256, 0),
    "completions 0ms, 8/request": ("sim", 200000, "completions", 8, 32, 0),
    "chat 0ms, 3 KB rows, batch 8": ("echo0", 20000, "chat", 8, 32, 3000),
    # Only with --only: 256 in flight against 50 ms allow 5,120 rows/s.
    "chat 50ms, batch 1": ("echo50", 25600, "chat", 1, 256, 0),
}
# Run unless --only names another.
DEFAULT = ["chat 0ms, batch 8", "chat 0ms, batch 1",
           "completions 0ms, 8/request", "chat 0ms, 3 KB rows, batch 8"]


class AbBench(backend_bench.Bench):
    def start_sdgd_binary(self, binary, extra):
        log = open(os.path.join(self.work, "sdgd.log"), "a")
        backends = [f"--backend=echo0=http://127.0.0.1:{self.echo0}/v1",
                    f"--backend=echo50=http://127.0.0.1:{self.echo50}/v1",
                    f"--backend=sim=http://127.0.0.1:{self.sim0}/v1"]
        state = tempfile.mkdtemp(prefix="state-", dir=self.work)
        self.sdgd, port = backend_bench.start_printing_port(
            [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--max_workers=256", "--log_level=warning",
             f"--state_dir={state}", *extra, *backends],
            "sdgd listening on", log)
        self.procs.append(self.sdgd)
        self.store = "durable"
        self.address = f"127.0.0.1:{port}"
        line = self.sdgd.stdout.readline()
        self.metrics_url = (
            f"http://127.0.0.1:{line.rsplit(':', 1)[1].strip()}/metrics")

    def stop_sdgd(self):
        self.sdgd.terminate()
        self.sdgd.wait(30)
        self.procs.remove(self.sdgd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--a", required=True, help="the sdgd before")
    parser.add_argument("--b", required=True, help="the sdgd after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="one scenario's name")
    parser.add_argument("--sdgd_flag", action="append", default=[],
                        help="a flag for both sdgds (e.g. --ephemeral)")
    parser.add_argument("--perf", action="store_true",
                        help="perf record each sdgd's last round; print its "
                        "CPU by library")
    parser.add_argument("--perf_sort", default="dso",
                        help="perf report's --sort keys (e.g. dso,sym)")
    parser.add_argument("--perf_lines", type=int, default=12,
                        help="how many lines of each perf report to print")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sdg-ab-")
    bench = AbBench(args.build, work, perf=False)
    figures = {}
    try:
        bench.start_nginx()
        bench.sim0 = bench.start_llmsim()
        for _ in range(args.rounds):
            for label, binary in (("A", args.a), ("B", args.b)):
                bench.start_sdgd_binary(binary, args.sdgd_flag)
                for name, (backend, rows, api, batch, workers,
                           context) in SCENARIOS.items():
                    if (args.only or name not in DEFAULT) and args.only != name:
                        continue
                    perf = None
                    if args.perf and _ == args.rounds - 1:
                        data = os.path.join(work, f"perf-{label}-{len(figures)}.data")
                        perf = subprocess.Popen(
                            ["perf", "record", "-F", "999", "-q", "-o", data,
                             "-p", str(bench.sdgd.pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    bench.sdgctl(f"{name} [{label}]", backend, rows, api, batch,
                                 workers, context_bytes=context)
                    if perf is not None:
                        perf.send_signal(2)
                        perf.wait()
                        report = subprocess.run(
                            ["perf", "report", "-i", data, "--sort", args.perf_sort,
                             "--stdio", "-q"], capture_output=True, text=True)
                        print(f"--- {name} [{label}]: sdgd's CPU by {args.perf_sort}")
                        print("\n".join(
                            report.stdout.splitlines()[:args.perf_lines]))
                    r = bench.results[-1]
                    figures.setdefault((name, label), []).append(
                        (r["rows_per_s"], r["cpu_us_per_row"]))
                bench.stop_sdgd()
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| scenario | A rows/s | B rows/s | B ÷ A | A µs CPU/row | B µs CPU/row | B ÷ A |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in SCENARIOS:
        if (name, "A") not in figures:
            continue
        a_rate = statistics.median(r for r, _ in figures[(name, "A")])
        b_rate = statistics.median(r for r, _ in figures[(name, "B")])
        a_cpu = statistics.median(c for _, c in figures[(name, "A")])
        b_cpu = statistics.median(c for _, c in figures[(name, "B")])
        print(f"| {name} | {a_rate:,.0f} | {b_rate:,.0f} | {b_rate / a_rate:.2f}× "
              f"| {a_cpu:.1f} | {b_cpu:.1f} | {b_cpu / a_cpu:.2f}× |")


if __name__ == "__main__":
    sys.exit(main())
