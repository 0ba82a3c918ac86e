#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs them; results go to
# bench/results/*.jsonl and a summary to stdout. Not part of the test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build="$root/build/release"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j 2 --target benches
mkdir -p "$root/bench/results"
echo "== scheduling overhead per shard (in-process runner that answers at once)"
"$build/bench/scheduler_bench" 2> /dev/null | tee "$root/bench/results/scheduler.jsonl"
echo "== cancellation latency, 256 requests hung in llmsim"
"$build/bench/cancel_bench" 2> /dev/null | tee "$root/bench/results/cancel.jsonl"
