#!/usr/bin/env bash
# After a deploy: is sdgd up and can it generate? Uses only the server's
# reflection service, no .proto files.
#
#   deploy/smoke.sh [OPTIONS] ADDR    e.g. deploy/smoke.sh sdgd.sdg.svc:50051
#
# OPTIONS, as sdgctl's: --tls (system roots), --tls_ca FILE, --tls_cert FILE
# --tls_key FILE (mTLS), --tls_server_name NAME, --token_file FILE (else
# the SDG_TOKEN environment variable). The token never goes on a command
# line: grpcurl expands it from the environment.
# Environment: SDG_SMOKE_MODEL (a model the backend serves; default: none
# sent, and sdgd uses the backend's model when it serves exactly one),
# SDG_SMOKE_BACKEND (a backend name; default: the server's default). Uses
# grpcurl; without it, deploy/grpc_reflect.py (Debian's python3-grpcio),
# which is also what CI runs.
# Exits 0 when every check passes, 1 naming the first that failed.
set -euo pipefail
usage="usage: deploy/smoke.sh [--tls] [--tls_ca F] [--tls_cert F --tls_key F] [--tls_server_name N] [--token_file F] HOST:PORT"
tls=0 tls_ca="" tls_cert="" tls_key="" tls_server_name="" token_file=""
while [ $# -gt 1 ]; do
  case $1 in
    --tls) tls=1 ;;
    --tls_ca=*) tls_ca=${1#*=} ;;
    --tls_cert=*) tls_cert=${1#*=} ;;
    --tls_key=*) tls_key=${1#*=} ;;
    --tls_server_name=*) tls_server_name=${1#*=} ;;
    --token_file=*) token_file=${1#*=} ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
addr=${1:?$usage}
model=${SDG_SMOKE_MODEL:-}
backend=${SDG_SMOKE_BACKEND:-}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "$token_file" ]; then
  SDG_TOKEN=$(tr -d '[:space:]' < "$token_file")
fi
export SDG_TOKEN=${SDG_TOKEN:-}
[ -n "$tls_ca$tls_cert$tls_key" ] && tls=1

if command -v grpcurl > /dev/null && [ "${SDG_SMOKE_CLIENT:-}" != python ]; then
  flags=()
  if [ "$tls" = 1 ]; then
    [ -n "$tls_ca" ] && flags+=(-cacert "$tls_ca")
    [ -n "$tls_cert" ] && flags+=(-cert "$tls_cert" -key "$tls_key")
    [ -n "$tls_server_name" ] && flags+=(-servername "$tls_server_name")
  else
    flags+=(-plaintext)
  fi
  # shellcheck disable=SC2016  # grpcurl expands ${SDG_TOKEN} itself
  [ -n "$SDG_TOKEN" ] && flags+=(-expand-headers -H 'authorization: Bearer ${SDG_TOKEN}')
  list() { grpcurl "${flags[@]}" "$addr" list; }
  call() { grpcurl "${flags[@]}" -max-time 300 -d "$2" "$addr" "$1"; }
else
  flags=()
  [ "$tls" = 1 ] && flags+=(--tls)
  [ -n "$tls_ca" ] && flags+=(--tls_ca "$tls_ca")
  [ -n "$tls_cert" ] && flags+=(--tls_cert "$tls_cert" --tls_key "$tls_key")
  [ -n "$tls_server_name" ] && flags+=(--tls_server_name "$tls_server_name")
  list() { "$here/grpc_reflect.py" "${flags[@]}" "$addr" list; }
  call() { "$here/grpc_reflect.py" "${flags[@]}" "$addr" call "$1" "$2"; }
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
