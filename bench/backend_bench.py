#!/usr/bin/python3
"""Backend throughput: sdgd (through sdgctl and gRPC) against two Python
references, side by side in one go, on loopback.

Backends: nginx with the echo module answering a fixed completion (after
`echo_sleep` for the 50 ms runs), so that the backend is not the bottleneck;
llmsim for batched completions (it must answer each prompt of a list) and
for a saturating server (--capacity 64) to compare the adaptive in-flight
limit with fixed ones.

Writes bench/results/backend.json, docs/benchmarks/backend.png (gnuplot) and
docs/BENCHMARKS.md. Run by bench/run.sh; needs Debian's /usr/bin/python3 with
python3-httpx and python3-aiohttp, nginx-light, libnginx-mod-http-echo and
gnuplot-nox.
"""
import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")

CHAT_REPLY = json.dumps({
    "id": "chatcmpl-echo", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "a fixed answer"}}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11}})
COMPLETION_REPLY = json.dumps({
    "id": "cmpl-echo", "object": "text_completion", "model": "m",
    "choices": [{"index": 0, "text": "a fixed answer", "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11}})
MODELS_REPLY = json.dumps({"object": "list", "data": [
    {"id": "m", "object": "model", "owned_by": "nginx-echo"}]})

NGINX_CONF = """
load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  default_type application/json;
  keepalive_requests 10000000;
  keepalive_timeout 600s;
  client_body_buffer_size 64k;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
{servers}
}}
"""
NGINX_SERVER = """
  server {{
    listen 127.0.0.1:{port};
    location = /v1/models {{ echo '{models}'; }}
    location = /v1/chat/completions {{ {sleep} echo '{chat}'; }}
    location = /v1/completions {{ {sleep} echo '{completion}'; }}
  }}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def start_printing_port(argv, prefix, log):
    """Starts a process that prints 'PREFIX HOST:PORT'; returns (proc, port)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    for line in proc.stdout:
        if line.startswith(prefix):
            return proc, int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"{argv[0]} exited before printing '{prefix}'")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def write_dataset(path, rows):
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": i, "question": f"What is item {i}?"}) + "\n")


class Bench:
    def __init__(self, build, work):
        self.build = build
        self.work = work
        self.procs = []
        self.results = []
        self.datasets = {}

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def dataset(self, rows):
        if rows not in self.datasets:
            path = os.path.join(self.work, f"rows-{rows}.jsonl")
            write_dataset(path, rows)
            self.datasets[rows] = path
        return self.datasets[rows]

    def start_nginx(self):
        self.echo50, self.echo0 = free_port(), free_port()
        servers = ""
        for port, sleep in ((self.echo50, "echo_sleep 0.05;"), (self.echo0, "")):
            servers += NGINX_SERVER.format(port=port, sleep=sleep,
                                           models=MODELS_REPLY, chat=CHAT_REPLY,
                                           completion=COMPLETION_REPLY)
        conf = os.path.join(self.work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=self.work, servers=servers))
        log = open(os.path.join(self.work, "nginx.log"), "w")
        self.procs.append(subprocess.Popen(
            ["/usr/sbin/nginx", "-p", self.work, "-c", conf, "-g", "daemon off;"],
            stdout=log, stderr=log))
        wait_for_port(self.echo50)
        wait_for_port(self.echo0)

    def start_llmsim(self, *flags):
        log = open(os.path.join(self.work, "llmsim.log"), "a")
        proc, port = start_printing_port(
            [os.path.join(self.build, "tests/llmsim/llmsim"),
             "--listen=127.0.0.1:0", "--model=m", *flags],
            "llmsim listening on", log)
        self.procs.append(proc)
        return port

    def start_sdgd(self):
        self.sim0 = self.start_llmsim()
        self.capacity64 = self.start_llmsim("--capacity=64", "--latency_ms=50")
        backends = [
            f"--backend=echo50=http://127.0.0.1:{self.echo50}/v1",
            f"--backend=echo0=http://127.0.0.1:{self.echo0}/v1",
            f"--backend=sim=http://127.0.0.1:{self.sim0}/v1",
        ]
        self.fixed_limits = [16, 32, 64, 128, 256]
        for limit in self.fixed_limits:
            backends.append(
                f"--backend=cap{limit}=http://127.0.0.1:{self.capacity64}/v1")
            backends.append(f"--backend_max_in_flight=cap{limit}={limit}")
        backends.append(
            f"--backend=adaptive=http://127.0.0.1:{self.capacity64}/v1")
        backends.append("--backend_max_in_flight=adaptive=adaptive")
        log = open(os.path.join(self.work, "sdgd.log"), "w")
        self.sdgd, port = start_printing_port(
            [os.path.join(self.build, "server/sdgd"), "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0", "--max_workers=64",
             "--log_level=warning", *backends],
            "sdgd listening on", log)
        self.procs.append(self.sdgd)
        self.address = f"127.0.0.1:{port}"
        line = self.sdgd.stdout.readline()
        assert line.startswith("sdgd metrics on"), line
        self.metrics_url = f"http://127.0.0.1:{line.rsplit(':', 1)[1].strip()}/metrics"

    def backend_seconds(self, backend):
        """sdgd's sum and count of backend request durations for `backend`."""
        text = urllib.request.urlopen(self.metrics_url).read().decode()
        values = {}
        for line in text.splitlines():
            for field in ("sum", "count"):
                prefix = (f"sdg_backend_request_duration_seconds_{field}"
                          f'{{backend="{backend}"}} ')
                if line.startswith(prefix):
                    values[field] = float(line[len(prefix):])
        return values.get("sum", 0.0), values.get("count", 0.0)

    def record(self, scenario, impl, result, **extra):
        result.update(scenario=scenario, impl=impl, **extra)
        result["cpu_us_per_row"] = result["cpu_s"] / result["rows"] * 1e6
        self.results.append(result)
        print(f"{scenario:28} {impl:12} {result['rows']:>7} rows "
              f"{result['rows_per_s']:>9.0f} rows/s "
              f"{result['cpu_us_per_row']:>7.1f} us CPU/row", flush=True)

    def sdgctl(self, scenario, backend, rows, api, batch_size, num_workers,
               **extra):
        out = os.path.join(self.work, "out.jsonl")
        sum0, count0 = self.backend_seconds(backend)
        cpu0 = cpu_seconds(self.sdgd.pid)
        start = time.monotonic()
        done = subprocess.run(
            [os.path.join(self.build, "client/sdgctl"), "generate",
             f"--server={self.address}", f"--input={self.dataset(rows)}",
             f"--output={out}", "--model=m", f"--api={api}",
             f"--backend={backend}", "--template=Answer briefly. {{question}}",
             "--max_tokens=16", f"--batch_size={batch_size}",
             f"--num_workers={num_workers}"],
            capture_output=True, text=True)
        seconds = time.monotonic() - start
        cpu = cpu_seconds(self.sdgd.pid) - cpu0
        sum1, count1 = self.backend_seconds(backend)
        extra["mean_request_ms"] = (sum1 - sum0) / max(1, count1 - count0) * 1e3
        if done.returncode != 0:
            raise RuntimeError(f"sdgctl failed: {done.stderr[-2000:]}")
        with open(out) as f:
            written = sum(1 for _ in f)
        assert written == rows, (written, rows)
        self.record(scenario, "sdgd", {"rows": rows, "seconds": seconds,
                                       "rows_per_s": rows / seconds,
                                       "cpu_s": cpu}, **extra)

    def python(self, scenario, impl, script, port, rows, *flags):
        done = subprocess.run(
            ["/usr/bin/python3", os.path.join(ROOT, "bench/python", script),
             f"--url=http://127.0.0.1:{port}/v1",
             f"--input={self.dataset(rows)}", *flags],
            capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{script} failed: {done.stderr[-2000:]}")
        self.record(scenario, impl, json.loads(done.stdout))

    def run(self, quick):
        scale = 10 if quick else 1
        # 1. One request per row, 256 in flight, 50 ms backend (10 s at best).
        rows = 51200 // scale
        self.sdgctl("chat 50ms, 256 in flight", "echo50", rows, "chat", 16, 32,
                    limit_rows_per_s=256 / 0.05)
        self.python("chat 50ms, 256 in flight", "sdg-style", "sdg_style.py",
                    self.echo50, rows, "--api=chat", "--batch_size=8",
                    "--num_workers=256")
        self.python("chat 50ms, 256 in flight", "asyncio", "async_ref.py",
                    self.echo50, rows, "--api=chat", "--in_flight=256")
        # 2. One request per row, no latency.
        self.sdgctl("chat 0ms", "echo0", 200000 // scale, "chat", 16, 32)
        self.python("chat 0ms", "sdg-style", "sdg_style.py", self.echo0,
                    20000 // scale, "--api=chat", "--batch_size=8",
                    "--num_workers=32")
        self.python("chat 0ms", "asyncio", "async_ref.py", self.echo0,
                    20000 // scale, "--api=chat", "--in_flight=256")
        # 3. Batched completions, 8 prompts a request, llmsim, no latency.
        self.sdgctl("completions 0ms, 8/request", "sim", 200000 // scale,
                    "completions", 8, 32)
        self.python("completions 0ms, 8/request", "sdg-style", "sdg_style.py",
                    self.sim0, 40000 // scale, "--api=completions", "--batched",
                    "--batch_size=8", "--num_workers=32")
        self.python("completions 0ms, 8/request", "asyncio", "async_ref.py",
                    self.sim0, 40000 // scale, "--api=completions",
                    "--batched", "--batch_size=8", "--in_flight=256")
        # 4. A server that serves 64 at once in 50 ms: fixed limits, adaptive.
        rows = 12800 // scale
        for limit in self.fixed_limits:
            self.sdgctl("capacity 64, 50ms", f"cap{limit}", rows, "chat", 8, 64,
                        limit=str(limit))
        self.sdgctl("capacity 64, 50ms", "adaptive", rows, "chat", 8, 64,
                    limit="adaptive")


def by(results, scenario, impl, **match):
    for r in results:
        if r["scenario"] == scenario and r["impl"] == impl and all(
                r.get(k) == v for k, v in match.items()):
            return r
    return None


def write_report(results, png, markdown, when):
    scenarios = ["chat 50ms, 256 in flight", "chat 0ms",
                 "completions 0ms, 8/request"]
    data = os.path.join(os.path.dirname(png), "backend.dat")
    with open(data, "w") as f:
        for s in scenarios:
            values = [by(results, s, i) for i in ("sdgd", "sdg-style", "asyncio")]
            f.write('"%s" %s\n' % (s, " ".join(
                "%.0f" % v["rows_per_s"] for v in values)))
    script = f"""
set terminal pngcairo size 900,480 font "sans,11"
set output "{png}"
set title "Rows per second, one machine (2 cores), loopback"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set logscale y
set yrange [100:*]
set ylabel "rows/s (log scale)"
set key top right
set grid ytics
plot "{data}" using 2:xtic(1) title "sdgd (sdgctl, gRPC)", \\
     "" using 3 title "Python, SDG style (threads + httpx)", \\
     "" using 4 title "Python, asyncio + aiohttp"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.remove(data)

    lines = []
    lines.append("| scenario | sdgd rows/s | SDG-style rows/s | asyncio rows/s "
                 "| sdgd ÷ SDG-style | sdgd ÷ asyncio | sdgd CPU/row |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for s in scenarios:
        d, t, a = (by(results, s, i) for i in ("sdgd", "sdg-style", "asyncio"))
        lines.append(
            f"| {s} | {d['rows_per_s']:,.0f} | {t['rows_per_s']:,.0f} | "
            f"{a['rows_per_s']:,.0f} | {d['rows_per_s'] / t['rows_per_s']:.1f}× | "
            f"{d['rows_per_s'] / a['rows_per_s']:.1f}× | "
            f"{d['cpu_us_per_row']:.1f} µs |")
    table = "\n".join(lines)

    chat50 = by(results, "chat 50ms, 256 in flight", "sdgd")
    limit_share = chat50["rows_per_s"] / chat50["limit_rows_per_s"] * 100
    measured_limit = 256 / (chat50["mean_request_ms"] / 1e3)
    cap_full = chat50["rows_per_s"] / measured_limit * 100
    cap_lines = ["| in-flight limit per endpoint | rows/s | of the best fixed |",
                 "|---|---:|---:|"]
    cap = [r for r in results if r["scenario"] == "capacity 64, 50ms"]
    best = max(r["rows_per_s"] for r in cap if r["limit"] != "adaptive")
    for r in cap:
        cap_lines.append(f"| {r['limit']} | {r['rows_per_s']:,.0f} | "
                         f"{r['rows_per_s'] / best * 100:.0f} % |")
    cap_table = "\n".join(cap_lines)
    with open(markdown, "w") as f:
        f.write(f"""# Benchmarks

Measured by `bench/run.sh` (one command; it installs what it needs, builds
Release and runs everything side by side). These are not tests: nothing here
asserts a time. Figures from one run on {when}, on this project's 2-core
Debian 12 machine, everything on loopback; the raw numbers are in
`bench/results/backend.json`, the scheduler and cancellation figures in
`bench/README.md`.

## Backend throughput: sdgd against the Python ways

Every sdgd run goes end to end: `sdgctl generate` reads a JSON-lines file,
sends it over gRPC, sdgd calls the backend and streams the rows back, and
sdgctl writes them in input order. The Python references get their prompts
in memory and write nothing.

- **SDG style**: InstructLab SDG's `LLMBlock` pattern, a
  `ThreadPoolExecutor` over shards of `batch_size` rows with one shared
  `httpx` client (openai-python's connection limits), one request per row
  inside a shard, or one list request per shard when batched.
- **asyncio**: the strongest plain-Python way, one event loop, `aiohttp`,
  a semaphore of 256 requests in flight.
- Backends: nginx with the echo module answering a fixed completion (after
  `echo_sleep 0.05` for the 50 ms rows) so the backend is not the
  bottleneck; llmsim for batched completions, since each prompt of a list
  needs its own choice.

{table}

![rows per second](benchmarks/backend.png)

- One request per row with 256 in flight against a 50 ms backend can at
  best reach 256 ÷ 0.05 s = 5,120 rows/s; sdgd reached
  {chat50['rows_per_s']:,.0f} rows/s, {limit_share:.0f} % of that limit
  (target: 95 %), end to end including sdgctl's start, reading and writing.
  Measured by sdgd, a backend request took {chat50['mean_request_ms']:.1f} ms on
  average (nginx's 50 ms sleep plus HTTP on a busy machine), for which 256 in
  flight allow {measured_limit:,.0f} rows/s: sdgd kept its cap
  {cap_full:.0f} % busy.
- With no backend latency sdgd spent {by(results, 'chat 0ms', 'sdgd')['cpu_us_per_row']:.1f} µs
  of CPU per row (user + system, from `/proc/PID/stat`; target: 50 µs) at
  {by(results, 'chat 0ms', 'sdgd')['rows_per_s']:,.0f} rows/s (target: 20,000 rows/s);
  nginx, sdgctl and sdgd share the two cores.
- sdgd's CPU time includes its gRPC serving of the results.

## Adaptive in-flight limit against a saturating server

llmsim with `--capacity 64 --latency_ms 50` serves 64 requests at once in
50 ms each and queues the rest, so the best possible is 1,280 rows/s and
any limit of 64 or more reaches it (more only adds queueing). One request
per row (chat), 64 workers × 8 rows, the same sdgd with one backend per
limit (`--backend_max_in_flight capN=N`, `adaptive=adaptive`).

{cap_table}

The adaptive limit starts at 16, doubles every round trip until the
latency rises above twice its floor or the server answers 429/503, then
grows by one per round trip (AIMD, `server/backend/concurrency_limit.h`).
""")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True, help="Release build dir")
    parser.add_argument("--quick", action="store_true",
                        help="a tenth of the rows, to check the harness")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sdg-bench-")
    bench = Bench(args.build, work)
    try:
        bench.start_nginx()
        bench.start_sdgd()
        bench.run(args.quick)
    finally:
        bench.stop()
    when = datetime.date.today().isoformat()
    results_path = os.path.join(ROOT, "bench/results/backend.json")
    with open(results_path, "w") as f:
        json.dump({"date": when, "machine": platform.machine(),
                   "cpus": os.cpu_count(), "results": bench.results}, f,
                  indent=1)
    os.makedirs(os.path.join(ROOT, "docs/benchmarks"), exist_ok=True)
    write_report(bench.results, os.path.join(ROOT, "docs/benchmarks/backend.png"),
                 os.path.join(ROOT, "docs/BENCHMARKS.md"), when)
    print(f"wrote {results_path}, docs/BENCHMARKS.md, docs/benchmarks/backend.png")


if __name__ == "__main__":
    sys.exit(main())
