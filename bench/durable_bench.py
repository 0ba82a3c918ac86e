#!/usr/bin/env python3
"""The job store's cost and what it buys, measured side by side:

1. Throughput, durable (--state_dir) against --ephemeral, two sdgd processes
   run one after the other on the same llmsim: batched completions with no
   latency, and one chat request per row at 256 in flight with 50 ms. The
   rate is the server's own: rows over the job's start-to-end time as
   GetJob reports it, so that the client's speed does not count.
2. Memory: a 1,000,000-row dataset (about 300 bytes a row) uploaded and run
   on the durable store; sdgd's peak RSS (VmHWM) and its RSS before and
   after.
3. Restart: sdgd killed (-9) in the middle of a job and started again on its
   state_dir; the time from the new process's start to the job's first
   row committed after it.

Writes bench/results/durable.json and prints one line per figure.
  bench/durable_bench.py --build build/release [--quick]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import backend_bench  # noqa: E402
from backend_bench import cpu_seconds, free_port, start_printing_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rfc3339_seconds(text):
    """Seconds since the epoch of a protobuf JSON timestamp."""
    date, frac = text.rstrip("Z"), "0"
    if "." in date:
        date, frac = date.split(".")
    return time.mktime(time.strptime(date, "%Y-%m-%dT%H:%M:%S")) + float(
        "0." + frac)


def vm(pid, field):
    """A /proc/PID/status field in MB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def write_dataset(path, rows, pad):
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": i, "question": f"What is item {i}?",
                                "context": pad}) + "\n")


class Bench:
    def __init__(self, build, work):
        self.build, self.work = build, work
        self.procs, self.results = [], {}

    # The same llmsim start as the backend benchmark's (build, work, procs).
    start_llmsim = backend_bench.Bench.start_llmsim

    def start_sdgd(self, store_args, port=0):
        log = open(os.path.join(self.work, "sdgd.log"), "a")
        argv = [os.path.join(self.build, "server/sdgd"),
                f"--listen=127.0.0.1:{port}", "--metrics_listen=127.0.0.1:0",
                "--max_workers=64", "--log_level=warning",
                f"--backend=sim0=http://127.0.0.1:{self.sim0}/v1",
                f"--backend=sim50=http://127.0.0.1:{self.sim50}/v1",
                *store_args]
        started = time.monotonic()
        proc, port = start_printing_port(argv, "sdgd listening on", log)
        self.procs.append(proc)
        return proc, f"127.0.0.1:{port}", started

    def sdgctl(self, address, *args):
        done = subprocess.run(
            [os.path.join(self.build, "client/sdgctl"), *args,
             f"--server={address}"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"sdgctl {args[0]} failed: {done.stderr}")
        return done.stdout

    def get(self, address, job_id):
        return json.loads(self.sdgctl(address, "get", job_id))

    def submit(self, address, dataset, backend, api, batch_size, workers):
        return self.sdgctl(
            address, "submit", f"--input={dataset}", "--model=m",
            f"--backend={backend}", f"--api={api}", "--max_tokens=16",
            "--template=Answer briefly. {{question}}",
            f"--batch_size={batch_size}", f"--num_workers={workers}").strip()

    def await_end(self, address, job_id, every=0.05):
        while True:
            job = self.get(address, job_id)
            if job["state"] not in ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"):
                return job
            time.sleep(every)

    def throughput(self, name, store_args, dataset, rows, **job):
        proc, address, _ = self.start_sdgd(store_args)
        cpu0 = cpu_seconds(proc.pid)
        job_id = self.submit(address, dataset, **job)
        done = self.await_end(address, job_id)
        cpu = cpu_seconds(proc.pid) - cpu0
        assert done["state"] == "JOB_STATE_SUCCEEDED", done
        assert int(done["rows_succeeded"]) == rows, done
        seconds = (rfc3339_seconds(done["end_time"]) -
                   rfc3339_seconds(done["start_time"]))
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
                "cpu_us_per_row": cpu / rows * 1e6}

    def run_throughput(self, quick):
        scale = 10 if quick else 1
        scenarios = [
            ("completions 0ms, 8/request", 200000 // scale,
             dict(backend="sim0", api="completions", batch_size=8,
                  workers=32)),
            ("chat 50ms, 256 in flight", 51200 // scale,
             dict(backend="sim50", api="chat", batch_size=16, workers=32)),
        ]
        for name, rows, job in scenarios:
            dataset = os.path.join(self.work, f"rows-{rows}.jsonl")
            write_dataset(dataset, rows, "")
            figures = {}
            # Alternated, twice each, so that a noisy moment hits both.
            for attempt in range(2):
                for store, args in (
                        ("ephemeral", ["--ephemeral"]),
                        ("durable", [f"--state_dir={self.work}/state-{attempt}"])):
                    result = self.throughput(name, args, dataset, rows, **job)
                    best = figures.get(store)
                    if best is None or result["rows_per_s"] > best["rows_per_s"]:
                        figures[store] = result
            figures["durable_over_ephemeral"] = (
                figures["durable"]["rows_per_s"] /
                figures["ephemeral"]["rows_per_s"])
            self.results[name] = figures
            print(f"{name:28} ephemeral {figures['ephemeral']['rows_per_s']:>8.0f}"
                  f" rows/s  durable {figures['durable']['rows_per_s']:>8.0f}"
                  f" rows/s  ratio {figures['durable_over_ephemeral']:.3f}",
                  flush=True)

    def measure_memory(self, state, start_job):
        """sdgd's RSS before, at its peak and after one job, which
        start_job(address) starts and returns (its id, what it reports)."""
        proc, address, _ = self.start_sdgd([f"--state_dir={self.work}/{state}"])
        time.sleep(0.5)
        before = vm(proc.pid, "VmRSS")
        job_id, reported = start_job(address)
        done = self.await_end(address, job_id, every=0.5)
        assert done["state"] == "JOB_STATE_SUCCEEDED", done
        time.sleep(1)
        after = vm(proc.pid, "VmRSS")
        peak = vm(proc.pid, "VmHWM")
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        return before, peak, after, reported

    def run_memory(self, quick):
        rows = 100000 if quick else 1000000
        dataset = os.path.join(self.work, "big.jsonl")
        write_dataset(dataset, rows, "x" * 230)  # about 300 bytes a line
        size = os.path.getsize(dataset)
        before, peak, after, _ = self.measure_memory(
            "big", lambda address: (self.submit(
                address, dataset, backend="sim0", api="completions",
                batch_size=8, workers=32), None))
        self.results["memory"] = {
            "rows": rows, "dataset_mb": size / 1e6, "rss_before_mb": before,
            "rss_peak_mb": peak, "rss_after_mb": after}
        print(f"memory: {rows} rows ({size / 1e6:.0f} MB): RSS {before:.0f} MB "
              f"before, peak {peak:.0f} MB, {after:.0f} MB after", flush=True)

    def run_inline_memory(self, quick):
        # 200,000 rows of about 146 bytes sent inline in one CreateJob (what
        # a grpcurl or SDK user does): sdgd's peak against the request.
        rows = 20000 if quick else 200000
        dataset = os.path.join(self.work, "inline.jsonl")
        write_dataset(dataset, rows, "x" * 80)
        size = os.path.getsize(dataset)

        def create_inline(address):
            sent = subprocess.run(
                [os.path.join(self.build, "bench/inline_job"), address,
                 dataset, "inline", "sim0"],
                capture_output=True, text=True, check=True)
            return "inline", int(sent.stdout)

        before, peak, after, request_bytes = self.measure_memory(
            "inline", create_inline)
        self.results["inline_memory"] = {
            "rows": rows, "jsonl_mb": size / 1e6,
            "request_mb": request_bytes / 1e6, "rss_before_mb": before,
            "rss_peak_mb": peak, "rss_after_mb": after,
            "peak_over_request": (peak - before) / (request_bytes / 1e6)}
        print(f"inline memory: {rows} rows, request {request_bytes / 1e6:.1f} "
              f"MB: RSS {before:.0f} MB before, peak {peak:.0f} MB, "
              f"{after:.0f} MB after", flush=True)

    def run_restart(self):
        rows = 20000
        dataset = os.path.join(self.work, f"rows-{rows}.jsonl")
        write_dataset(dataset, rows, "")
        port = free_port()
        state = f"--state_dir={self.work}/restart"
        proc, address, _ = self.start_sdgd([state], port)
        job_id = self.submit(address, dataset, backend="sim50", api="chat",
                             batch_size=8, workers=16)
        while int(self.get(address, job_id).get("rows_succeeded", 0)) < rows // 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc, address, started = self.start_sdgd([state], port)
        committed = int(self.get(address, job_id).get("rows_succeeded", 0))
        while int(self.get(address, job_id).get("rows_succeeded", 0)) <= committed:
            time.sleep(0.005)
        seconds = time.monotonic() - started
        self.await_end(address, job_id)
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        self.results["restart"] = {"rows_committed_at_kill": committed,
                                   "seconds_to_first_resumed_row": seconds}
        print(f"restart: first resumed row {seconds * 1000:.0f} ms after the "
              f"new sdgd started ({committed} rows were committed)", flush=True)

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sdg-durable-bench.")
    bench = Bench(os.path.abspath(args.build), work)
    try:
        bench.sim0 = bench.start_llmsim()
        bench.sim50 = bench.start_llmsim("--latency_ms=50")
        bench.run_throughput(args.quick)
        bench.run_memory(args.quick)
        bench.run_inline_memory(args.quick)
        bench.run_restart()
    finally:
        bench.stop()
    bench.results["when"] = time.strftime("%Y-%m-%d")
    out = os.path.join(ROOT, "bench/results/durable.json")
    with open(out, "w") as f:
        json.dump(bench.results, f, indent=2)
    print(f"wrote {out}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
