#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs them all, side by side in one go:
# results go to bench/results/, the backend comparison also to
# docs/BENCHMARKS.md and docs/benchmarks/backend.png. Not part of the test
# suite. Takes about ten minutes on 2 cores.
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
echo "== backend throughput: sdgd vs Python references (nginx echo, llmsim)"
/usr/bin/python3 "$root/bench/backend_bench.py" --build "$build"
echo "== the job store: durable vs --ephemeral, a 1,000,000-row job's memory, restart"
/usr/bin/python3 "$root/bench/durable_bench.py" --build "$build"
echo "== a pipeline streamed vs block by block (examples/pipelines/knowledge, 1,000 seeds)"
/usr/bin/python3 "$root/bench/pipeline_bench.py" --build "$build"
