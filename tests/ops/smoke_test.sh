#!/usr/bin/env bash
# Runs deploy/smoke.sh the way an operator does after a deploy, against a
# real sdgd and llmsim on loopback, with the reflection-only Python client
# (grpcurl is not packaged in Debian 12). Then checks that the smoke test
# fails when it should: against a server whose backend is dead.
#   tests/ops/smoke_test.sh BUILD_DIR
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/lib.sh"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$build/tests/llmsim/llmsim" --listen=127.0.0.1:0 --model=sim-model \
  > "$work/llmsim.out" 2>&1 &
pids+=($!)
sim_port=$(wait_for_port "$work/llmsim.out" "llmsim listening on")
"$build/server/sdgd" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend=sim=http://127.0.0.1:$sim_port/v1 \
  --backend=dead=http://127.0.0.1:1/v1 --backend_max_attempts=1 \
  --backend_outage_limit=0 \
  --state_dir="$work/state" \
  > "$work/sdgd.out" 2> "$work/sdgd.log" &
pids+=($!)
port=$(wait_for_port "$work/sdgd.out" "sdgd listening on")

export SDG_SMOKE_CLIENT=python
# No model named: sdgd takes llmsim's only one.
"$root/deploy/smoke.sh" "127.0.0.1:$port"

# The model named, so that the job is admitted and fails at the backend (a
# dead backend lists no model to default to).
if SDG_SMOKE_BACKEND=dead SDG_SMOKE_MODEL=sim-model \
    "$root/deploy/smoke.sh" "127.0.0.1:$port" 2> "$work/dead.err"; then
  echo "smoke.sh passed against a dead backend" >&2
  exit 1
fi
grep -q "the three-row job did not succeed" "$work/dead.err" || {
  cat "$work/dead.err" >&2
  exit 1
}
echo "smoke_test: smoke.sh passes against a live backend and fails against a dead one"
