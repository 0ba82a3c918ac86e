#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs them all, side by side in one go:
# results go to bench/results/, the backend comparison also to
# docs/BENCHMARKS.md and docs/benchmarks/backend.png. Not part of the test
# suite. Takes about fifteen minutes on 2 cores.
#   SDG_BENCH_BEFORE=COMMIT bench/run.sh
# also builds sdgd at COMMIT (build/before) and runs each sdgd scenario of
# the backend comparison on it too, for a before-and-after table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib.sh"
"$root/scripts/setup.sh" bench
use_ccache "$root"
build="$root/build/release"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j 2 --target benches sdgd sdgctl llmsim
mkdir -p "$root/bench/results"
echo "== scheduling overhead per shard (in-process runner that answers at once)"
"$build/bench/scheduler_bench" 2> /dev/null | tee "$root/bench/results/scheduler.jsonl"
echo "== cancellation latency, 256 requests hung in llmsim"
"$build/bench/cancel_bench" 2> /dev/null | tee "$root/bench/results/cancel.jsonl"
before_flags=()
if [ -n "${SDG_BENCH_BEFORE:-}" ]; then
  echo "== sdgd at $SDG_BENCH_BEFORE, for the before-and-after table"
  before_src=$(mktemp -d)
  trap 'rm -rf "$before_src"' EXIT
  git -C "$root" archive "$SDG_BENCH_BEFORE" | tar -x -C "$before_src"
  cmake -S "$before_src" -B "$root/build/before" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$root/build/before" -j 2 --target sdgd
  before_flags=(--before "$root/build/before/server/sdgd"
    --before_label "$(git -C "$root" rev-parse --short "$SDG_BENCH_BEFORE")")
fi
echo "== backend throughput: sdgd vs Python references (nginx echo, llmsim)"
/usr/bin/python3 "$root/bench/backend_bench.py" --build "$build" "${before_flags[@]}"
echo "== the job store: durable vs --ephemeral, a 1,000,000-row job's memory, restart"
/usr/bin/python3 "$root/bench/durable_bench.py" --build "$build"
echo "== a pipeline streamed vs block by block (examples/pipelines/knowledge, 1,000 seeds)"
/usr/bin/python3 "$root/bench/pipeline_bench.py" --build "$build"
echo "== finished jobs stored: Get/List/Create with 5,000 and 50,000, restart"
stored_state=$(mktemp -d)
"$build/bench/stored_jobs_bench" populate "$stored_state/state" 50000 2> /dev/null |
  tee "$root/bench/results/stored_jobs.jsonl"
"$build/bench/stored_jobs_bench" restart "$stored_state/state" 2> /dev/null |
  tee -a "$root/bench/results/stored_jobs.jsonl"
rm -rf "$stored_state"
echo "== the PostgreSQL store against SQLite, one replica"
/usr/bin/python3 "$root/bench/store_bench.py" --build "$build" |
  tee "$root/bench/results/store.txt"
echo "== a replica's takeover on PostgreSQL: after SIGKILL, after SIGTERM"
/usr/bin/python3 "$root/bench/takeover_bench.py" --build "$build" |
  tee "$root/bench/results/takeover.txt"
