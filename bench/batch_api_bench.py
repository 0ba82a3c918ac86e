#!/usr/bin/env python3
"""The Batch API against GenerateJob, side by side, and an upload's memory.

Starts llmsim (zero latency) and one sdgd (durable state_dir, the Batch API
on), then runs the same N chat rows both ways, alternating, --rounds times:

  generate  `sdgctl generate --api chat --template {{question}}`: the rows
            inline, streamed back to a file;
  batch     the rows as N Batch API lines: upload, create, poll every 20 ms
            until completed, download the output file.

Each is timed from its first byte sent to its output on disk; the medians
and their ratio (batch / generate, lines per second) are printed. First it
uploads a file of --upload_mib MiB and reports sdgd's peak resident memory
(VmHWM) above its resident memory before it; the upload comes first, while
the peak is still the idle server's. With --big_lines N, last, one batch
of N lines (say 1,000,000) and sdgd's peak resident memory during it above
its resident memory before it. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_line(path, prefix, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.strip()
        time.sleep(0.05)
    raise RuntimeError(f"{path}: no line starting with {prefix!r}")


def http(method, url, body=None, content_type="application/json"):
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=600) as reply:
        return reply.read()


def upload(base, path):
    boundary = "sdg-bench-boundary"
    with open(path, "rb") as f:
        data = f.read()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; "
            f"name=\"purpose\"\r\n\r\nbatch\r\n--{boundary}\r\n"
            f"Content-Disposition: form-data; name=\"file\"; "
            f"filename=\"in.jsonl\"\r\n\r\n").encode() + data + \
        f"\r\n--{boundary}--\r\n".encode()
    return json.loads(http("POST", base + "/files", body,
                           f"multipart/form-data; boundary={boundary}"))


def write_lines(path, count):
    """`count` Batch API chat lines, each asking "question I"."""
    with open(path, "w") as lines:
        for i in range(count):
            lines.write(json.dumps({
                "custom_id": f"r{i}", "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [
                    {"role": "user", "content": f"question {i}"}]}}) + "\n")


def run_batch(base, lines_path, out_path, phases):
    start = time.perf_counter()
    file = upload(base, lines_path)
    uploaded = time.perf_counter()
    batch = json.loads(http("POST", base + "/batches", json.dumps({
        "input_file_id": file["id"], "endpoint": "/v1/chat/completions",
        "completion_window": "24h"}).encode()))
    created = time.perf_counter()
    while batch["status"] not in ("completed", "failed", "expired",
                                  "cancelled"):
        time.sleep(0.02)
        batch = json.loads(http("GET", base + "/batches/" + batch["id"]))
    assert batch["status"] == "completed", batch
    completed = time.perf_counter()
    with open(out_path, "wb") as out:
        out.write(http("GET", base + f"/files/{batch['output_file_id']}"
                       "/content"))
    end = time.perf_counter()
    for name, seconds in (("upload", uploaded - start),
                          ("create", created - uploaded),
                          ("run", completed - created),
                          ("download", end - completed)):
        phases.setdefault(name, []).append(round(seconds, 3))
    return end - start


def run_generate(sdgctl, port, rows_path, out_path):
    start = time.perf_counter()
    subprocess.run([sdgctl, "generate", "--server", f"127.0.0.1:{port}",
                    "--input", rows_path, "--output", out_path,
                    "--template", "{{question}}", "--model", "m",
                    "--api", "chat"], check=True, capture_output=True)
    return time.perf_counter() - start


def memory_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(match.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default="build/release")
    p.add_argument("--lines", type=int, default=50000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--upload_mib", type=int, default=200)
    p.add_argument("--big_lines", type=int, default=0,
                   help="then one batch of this many lines, and sdgd's "
                        "peak memory during it (0: none)")
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="sdg-batch-bench.")
    sim_port, port, openai_port = free_port(), free_port(), free_port()
    sim = subprocess.Popen(
        [f"{args.build}/tools/llmsim/llmsim", f"--listen=127.0.0.1:{sim_port}",
         "--model=m"], stdout=open(f"{work}/llmsim.out", "w"),
        stderr=subprocess.DEVNULL)
    sdgd = subprocess.Popen(
        [f"{args.build}/server/sdgd", f"--listen=127.0.0.1:{port}",
         "--metrics_listen=127.0.0.1:0",
         f"--openai_listen=127.0.0.1:{openai_port}",
         f"--backend=sim=http://127.0.0.1:{sim_port}/v1",
         f"--state_dir={work}/state", "--openai_max_file_lines=10000000",
         f"--openai_max_file_mib={max(args.upload_mib, 1024) + 16}"],
        stdout=open(f"{work}/sdgd.out", "w"),
        stderr=open(f"{work}/sdgd.log", "w"))
    try:
        wait_for_line(f"{work}/llmsim.out", "llmsim listening on")
        wait_for_line(f"{work}/sdgd.out", "sdgd Batch API on")
        base = f"http://127.0.0.1:{openai_port}/v1"
        rows_path, lines_path = f"{work}/rows.jsonl", f"{work}/lines.jsonl"
        with open(rows_path, "w") as rows:
            for i in range(args.lines):
                rows.write(json.dumps({"question": f"question {i}"}) + "\n")
        write_lines(lines_path, args.lines)
        big = f"{work}/big.jsonl"
        padding = "x" * 900
        with open(big, "w") as f:
            i = 0
            while f.tell() < args.upload_mib << 20:
                f.write(json.dumps({
                    "custom_id": f"u{i}", "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "m", "messages": [
                        {"role": "user", "content": padding}]}}) + "\n")
                i += 1
        before = memory_kib(sdgd.pid, "VmRSS")
        started = time.perf_counter()
        upload(base, big)
        print(json.dumps({
            "upload_mib": round(os.path.getsize(big) / (1 << 20), 1),
            "upload_s": round(time.perf_counter() - started, 2),
            "rss_before_mib": round(before / 1024, 1),
            "peak_rss_mib": round(memory_kib(sdgd.pid, "VmHWM") / 1024, 1),
            "peak_above_before_mib": round(
                (memory_kib(sdgd.pid, "VmHWM") - before) / 1024, 1)}))
        sdgctl = f"{args.build}/client/sdgctl"
        times = {"generate": [], "batch": []}
        phases = {}
        for _ in range(args.rounds):
            times["generate"].append(run_generate(
                sdgctl, port, rows_path, f"{work}/generated.jsonl"))
            times["batch"].append(run_batch(base, lines_path,
                                            f"{work}/output.jsonl", phases))
        rates = {k: args.lines / statistics.median(v) for k, v in times.items()}
        print(json.dumps({
            "lines": args.lines, "rounds": args.rounds,
            "generate_rows_per_s": round(rates["generate"]),
            "batch_lines_per_s": round(rates["batch"]),
            "batch_over_generate": round(rates["batch"] / rates["generate"], 3),
            "seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
            "batch_phase_seconds": phases,
        }))
        if args.big_lines:
            # One batch of --big_lines lines, with sdgd's peak memory
            # counted from here (writing 5 to clear_refs resets VmHWM).
            big_lines = f"{work}/big_lines.jsonl"
            write_lines(big_lines, args.big_lines)
            with open(f"/proc/{sdgd.pid}/clear_refs", "w") as f:
                f.write("5")
            before = memory_kib(sdgd.pid, "VmRSS")
            big_phases = {}
            seconds = run_batch(base, big_lines, f"{work}/big_output.jsonl",
                                big_phases)
            with open(f"{work}/big_output.jsonl") as f:
                output_lines = sum(1 for _ in f)
            print(json.dumps({
                "big_batch_lines": args.big_lines,
                "output_lines": output_lines,
                "lines_per_s": round(args.big_lines / seconds),
                "phase_seconds": big_phases,
                "rss_before_mib": round(before / 1024, 1),
                "peak_above_before_mib": round(
                    (memory_kib(sdgd.pid, "VmHWM") - before) / 1024, 1)}))

    finally:
        for process in (sdgd, sim):
            process.terminate()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
