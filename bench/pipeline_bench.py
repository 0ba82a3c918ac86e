#!/usr/bin/env python3
"""A pipeline streamed through sdgd against the same steps run block by block.

The pipeline is examples/pipelines/knowledge (shaped like InstructLab's
full/knowledge.yaml: spell-check, flatten, rename, question/answer pairs
with drop_duplicates, three judges each with a filter) on 1,000 seed
documents, against llmsim with 50 ms per request and 64 requests served at
once (bench/pipeline_replies.jsonl: replies shaped as the parsers expect,
each question made distinct by a hash of its prompt).

- streamed: one sdgd job of the whole pipeline.
- block by block: what InstructLab does, each step over the whole dataset
  before the next starts: one sdgd job per step, each on the previous
  job's output (which sdgctl writes in InstructLab's order).

Both are timed from the first job's submission; the first output row is the
first time GetJob reports a row of the job that makes the final rows (polled
every 20 ms). The two outputs must be identical, row for row.

Writes bench/results/pipeline.json and prints one line per run.
  bench/pipeline_bench.py --build build/release [--rows 1000] [--num_workers 64]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend_bench import cpu_seconds, start_printing_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "pipelines", "knowledge")


def split_blocks(pipeline_text):
    """The pipeline file's block entries as text, config paths absolute."""
    body = pipeline_text.split("\nblocks:\n", 1)[1].split("\ndatamixing:", 1)[0]
    blocks, current = [], []
    for line in body.splitlines():
        if line.startswith("  - name:") and current:
            blocks.append("\n".join(current))
            current = []
        if line.strip():
            current.append(line.replace(
                "config_path: configs/",
                f"config_path: {EXAMPLE}/configs/"))
    blocks.append("\n".join(current))
    return blocks


def write_pipeline(path, blocks):
    with open(path, "w") as f:
        f.write('version: "1.0"\nblocks:\n' + "\n".join(blocks) + "\n")


def write_seeds(path, rows):
    docs = [("astronomy", "Mars has two smal moons, Phobos and Deimos."),
            ("chemistry", "Water boils at 100 degres Celsius at sea level.")]
    with open(path, "w") as f:
        for i in range(rows):
            domain, doc = docs[i % 2]
            f.write(json.dumps({"domain": domain,
                                "document": f"{doc} (note {i})"}) + "\n")


def worker_switches(pid):
    """Context switches of sdgd's workers so far (sdg-worker threads): each
    is a worker going to sleep or being put off its CPU."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != "sdg-worker":
                    continue
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches",
                                        "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total


class Run:
    def __init__(self, build, work):
        self.sdgctl_path = os.path.join(build, "client", "sdgctl")
        self.work = work
        self.procs = []

    def start(self, build):
        log = open(os.path.join(self.work, "llmsim.log"), "w")
        llmsim, llmsim_port = start_printing_port(
            [os.path.join(build, "tools", "llmsim", "llmsim"),
             "--listen=127.0.0.1:0", "--model=sim-model", "--latency_ms=50",
             "--capacity=64",
             "--replies=" + os.path.join(ROOT, "bench", "pipeline_replies.jsonl")],
            "llmsim listening on", log)
        self.procs.append(llmsim)
        sdgd, self.port = start_printing_port(
            [os.path.join(build, "server", "sdgd"), "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0",
             f"--backend=sim=http://127.0.0.1:{llmsim_port}/v1",
             "--state_dir=" + os.path.join(self.work, "state")],
            "sdgd listening on", open(os.path.join(self.work, "sdgd.log"), "w"))
        self.procs.append(sdgd)
        self.sdgd_pid = sdgd.pid

    def stop(self):
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait()

    def sdgctl(self, *args):
        out = subprocess.run([self.sdgctl_path, f"--server=127.0.0.1:{self.port}",
                              *args], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"sdgctl {args[0]} failed: {out.stderr}")
        return out.stdout

    def job(self, pipeline, seeds, job_id, start, first_row_wanted):
        """Runs one job to its end; returns (first row time or None, end)."""
        self.sdgctl("submit", "--pipeline=" + pipeline, "--input=" + seeds,
                    "--job_id=" + job_id, f"--num_workers={self.num_workers}")
        first_row = None
        while True:
            job = json.loads(self.sdgctl("get", job_id))
            if first_row is None and first_row_wanted and int(
                    job.get("rows_succeeded", 0)) > 0:
                first_row = time.monotonic() - start
            if job["state"] not in ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"):
                if job["state"] != "JOB_STATE_SUCCEEDED":
                    raise RuntimeError(f"job {job_id} ended {job['state']}: "
                                       f"{job.get('reason')}")
                return first_row, time.monotonic() - start
            time.sleep(0.02)

    def output(self, job_id, path):
        self.sdgctl("output", job_id, "-o", path)
        with open(path) as f:
            return f.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--rows", type=int, default=1000)
    # Shards in progress per job: enough to keep llmsim's 64 slots busy (the
    # default, min(32, CPUs + 4), is 6 here), the same for both runs.
    parser.add_argument("--num_workers", type=int, default=64)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sdgd-pipeline-bench.")
    run = Run(args.build, work)
    run.num_workers = args.num_workers
    try:
        run.start(args.build)
        seeds = os.path.join(work, "seeds.jsonl")
        write_seeds(seeds, args.rows)
        with open(os.path.join(EXAMPLE, "pipeline.yaml")) as f:
            blocks = split_blocks(f.read())
        whole = os.path.join(work, "pipeline.yaml")
        write_pipeline(whole, blocks)

        cpu0, switches0 = cpu_seconds(run.sdgd_pid), worker_switches(run.sdgd_pid)
        start = time.monotonic()
        streamed_first, streamed_total = run.job(whole, seeds, "streamed",
                                                 start, True)
        streamed_cpu = cpu_seconds(run.sdgd_pid) - cpu0
        streamed_switches = worker_switches(run.sdgd_pid) - switches0
        streamed = run.output("streamed", os.path.join(work, "streamed.jsonl"))
        output_rows = streamed.count("\n")

        start = time.monotonic()
        current = seeds
        for i, block in enumerate(blocks):
            step = os.path.join(work, f"step{i}.yaml")
            write_pipeline(step, [block])
            last = i + 1 == len(blocks)
            first, total = run.job(step, current, f"step{i}", start, last)
            current = os.path.join(work, f"step{i}.jsonl")
            text = run.output(f"step{i}", current)
        barrier_first, barrier_total = first, total
        same = text == streamed
        results = {
            "seed_rows": args.rows,
            "output_rows": output_rows,
            "llmsim": "--latency_ms 50 --capacity 64",
            "num_workers": args.num_workers,
            "streamed": {"total_s": round(streamed_total, 2),
                         "first_row_s": round(streamed_first, 2),
                         # sdgd's CPU (every thread) and its workers'
                         # context switches over the streamed job.
                         "sdgd_cpu_us_per_output_row":
                             round(streamed_cpu / output_rows * 1e6, 1),
                         "worker_switches_per_output_row":
                             round(streamed_switches / output_rows, 2)},
            "block_by_block": {"total_s": round(barrier_total, 2),
                               "first_row_s": round(barrier_first, 2)},
            "total_ratio": round(streamed_total / barrier_total, 3),
            "streamed_first_row_share": round(streamed_first / streamed_total, 3),
            "outputs_identical": same,
        }
        print(json.dumps(results))
        os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
        with open(os.path.join(ROOT, "bench", "results", "pipeline.json"), "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        if not same:
            sys.exit("the streamed output differs from the block-by-block one")
    finally:
        run.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
