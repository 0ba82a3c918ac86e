#!/usr/bin/env bash
# Runs deploy/smoke.sh the way an operator does after a deploy, against a
# real sdgd and llmsim on loopback, with the reflection-only Python client
# (grpcurl is not packaged in Debian 12). Then checks that the smoke test
# fails when it should: against a server whose backend is dead. Then again
# with TLS and a tenant's token, as the production overlay deploys it
# (certificates made here with openssl), and that without the token the job
# is refused.
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

"$build/tools/llmsim/llmsim" --listen=127.0.0.1:0 --model=sim-model \
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
# TLS and tokens.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 -subj /CN=smoke-ca \
  -addext basicConstraints=critical,CA:TRUE 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/tls.key" -out "$work/tls.csr" -subj /CN=sdgd 2> /dev/null
printf 'subjectAltName=DNS:sdgd.sdg.svc\n' > "$work/tls.ext"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
  -set_serial 1 -days 2 -extfile "$work/tls.ext" -out "$work/tls.crt" 2> /dev/null
token=$(head -c 32 /dev/urandom | base64 | tr -d '/+=')
printf '%s' "$token" > "$work/smoke.token"
printf 'smoke sha256:%s\n' "$(printf '%s' "$token" | sha256sum | cut -c1-64)" \
  > "$work/tokens"
"$build/server/sdgd" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend=sim=http://127.0.0.1:$sim_port/v1 \
  --tls_cert="$work/tls.crt" --tls_key="$work/tls.key" \
  --auth_tokens_file="$work/tokens" --state_dir="$work/secure-state" \
  > "$work/secure.out" 2> "$work/secure.log" &
pids+=($!)
secure_port=$(wait_for_port "$work/secure.out" "sdgd listening on")
tls_flags=(--tls_ca="$work/ca.pem" --tls_server_name=sdgd.sdg.svc)
"$root/deploy/smoke.sh" "${tls_flags[@]}" --token_file="$work/smoke.token" \
  "127.0.0.1:$secure_port"
if SDG_TOKEN= "$root/deploy/smoke.sh" "${tls_flags[@]}" "127.0.0.1:$secure_port" \
    2> "$work/anonymous.err"; then
  echo "smoke.sh passed with no token against a server that requires one" >&2
  exit 1
fi
grep -q "UNAUTHENTICATED" "$work/anonymous.err" || {
  cat "$work/anonymous.err" >&2
  exit 1
}
if grep -q "$token" "$work/secure.log"; then
  echo "the token appears in sdgd's log" >&2
  exit 1
fi
echo "smoke_test: smoke.sh passes against a live backend and fails against a dead one; with TLS and a token it passes, and without the token it is refused"
