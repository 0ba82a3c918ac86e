#!/usr/bin/env bash
# After a deploy: is sdgd up and can it generate? Uses only the server's
# reflection service, no .proto files.
#
#   deploy/smoke.sh ADDR            e.g. deploy/smoke.sh sdgd.sdg.svc:50051
#
# Environment: SDG_SMOKE_MODEL (a model the backend serves; default: none
# sent, and sdgd uses the backend's model when it serves exactly one),
# SDG_SMOKE_BACKEND (a backend name; default: the server's default). Uses grpcurl; without it, deploy/grpc_reflect.py (Debian's
# python3-grpcio), which is also what CI runs.
# Exits 0 when every check passes, 1 naming the first that failed.
set -euo pipefail
addr=${1:?usage: deploy/smoke.sh HOST:PORT}
model=${SDG_SMOKE_MODEL:-}
backend=${SDG_SMOKE_BACKEND:-}
here=$(cd "$(dirname "$0")" && pwd)

if command -v grpcurl > /dev/null && [ "${SDG_SMOKE_CLIENT:-}" != python ]; then
  list() { grpcurl -plaintext "$addr" list; }
  call() { grpcurl -plaintext -max-time 300 -d "$2" "$addr" "$1"; }
else
  list() { "$here/grpc_reflect.py" "$addr" list; }
  call() { "$here/grpc_reflect.py" "$addr" call "$1" "$2"; }
fi
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }

services=$(list) || fail "cannot list services at $addr (is it up? is reflection on?)"
for service in sdg.v1.GenerationService grpc.health.v1.Health; do
  grep -qx "$service" <<< "$services" || fail "$service is not served; got: $services"
done
echo "smoke: services listed"

health=$(call grpc.health.v1.Health/Check '{"service": ""}') \
  || fail "health check failed"
grep -q '"status": "SERVING"' <<< "$health" || fail "not serving: $health"
echo "smoke: health SERVING"

job_id="smoke-$(date +%s)-$$"
request=$(cat <<JSON
{
  "jobId": "$job_id",
  "block": {"model": "$model", "backend": "$backend", "maxTokens": 16,
            "promptTemplate": "Say hello to {{name}}."},
  "rows": [{"name": "Ada"}, {"name": "Grace"}, {"name": "Linus"}],
  "batchSize": 3
}
JSON
)
events=$(call sdg.v1.GenerationService/GenerateJob "$request") \
  || fail "GenerateJob failed: $events"
grep -q '"state": "JOB_STATE_SUCCEEDED"' <<< "$events" \
  || fail "the three-row job did not succeed: $(grep -A3 -E '"(finished|shardError)"' <<< "$events")"
grep -q '"rowsSucceeded": "3"' <<< "$events" || fail "not 3 rows: $events"
echo "smoke: a three-row job SUCCEEDED"

# The job store: the finished job's events come back from it.
replay=$(call sdg.v1.GenerationService/WatchJob "{\"jobId\": \"$job_id\"}") \
  || fail "WatchJob failed: $replay"
grep -q '"state": "JOB_STATE_SUCCEEDED"' <<< "$replay" \
  || fail "WatchJob did not replay the finished job: $replay"
echo "smoke: WatchJob replays the job from the job store"
