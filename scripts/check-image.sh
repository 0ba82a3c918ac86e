#!/usr/bin/env bash
# Builds sdgd's image from docker/Dockerfile with podman and checks it the way
# users run it: containers from the image, a volume, the client outside.
#   scripts/check-image.sh BUILD_DIR
# BUILD_DIR holds the sdgctl that plays the user's client (scripts/test.sh
# passes its build). Runs as root (podman's rootful mode). No image registry
# is needed: the base, debian:bookworm-slim, is made here from Debian's own
# mirror with debootstrap and kept in podman's store, remade each month.
# Environment: SDG_DEBIAN_MIRROR (default: this machine's first apt source),
# SDG_IMAGE (the tag to build; default sdgd:check).
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=SDG_DEBIAN_MIRROR,SDG_IMAGE "$0" "$@"
fi
build=$(cd "${1:?usage: scripts/check-image.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source scripts/lib.sh
scripts/setup.sh image

image=${SDG_IMAGE:-sdgd:check}
base=docker.io/library/debian:bookworm-slim
sdgctl=$build/client/sdgctl
[ -x "$sdgctl" ] || { echo "check-image: no $sdgctl; build first" >&2; exit 1; }

# This VM's cgroup layout rejects crun and podman's default rlimits (above
# this shell's hard limits): runc, cgroupfs and limits within ours. sdgd
# keeps a connection per request in flight, so nofile stays well above 1024.
podman_() { podman --runtime runc --cgroup-manager cgroupfs "$@"; }
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] || [ "$nofile" -gt 16384 ] && nofile=16384
run_flags=(--network host --ulimit "nofile=$nofile:$nofile"
  --ulimit nproc=4096:4096 --read-only)

work=$(mktemp -d)
rootfs=
tag=sdg-check-$$
volume=$tag-state
pids=()         # podman run processes: they end with their containers
sdgctl_pid=
cleanup() {
  [ -n "$sdgctl_pid" ] && kill "$sdgctl_pid" 2> /dev/null
  # One by one: podman 4.3's `rm -f` removes none of its arguments when one
  # of them does not exist.
  for name in llmsim llmsim-2 sdgd; do
    podman_ rm -f -t 0 "$tag-$name" > /dev/null 2>&1 || true
  done
  [ -f "$work/containers.conf" ] && compose down -v > /dev/null 2>&1
  [ -f "$work/compose.hold.yaml" ] && pg_compose down -v > /dev/null 2>&1
  for pid in "${pids[@]}" $sdgctl_pid; do wait "$pid" 2>/dev/null || true; done
  podman_ volume rm -f "$volume" > /dev/null 2>&1 || true
  rm -rf "$work" ${rootfs:+"$rootfs"}
}
trap cleanup EXIT
fail() {
  echo "check-image: FAIL: $*" >&2
  for log in "$work"/*.log; do
    [ -f "$log" ] && { echo "--- $log" >&2; tail -20 "$log" >&2; }
  done
  exit 1
}
step() { echo "check-image: $*"; }

# --- The base image ---------------------------------------------------------
mirror=${SDG_DEBIAN_MIRROR:-$(
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources || true
    grep -hs '^deb ' /etc/apt/sources.list || true; } | awk '{print $2}' \
    | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
month=$(date +%Y-%m)
made=$(podman_ image inspect --format '{{index .Labels "org.sdg.base"}}' \
  "$base" 2> /dev/null || echo missing)
# An image without the label came from a registry: it is used as it is.
if [ "$made" = missing ] || { [ -n "$made" ] && [ "$made" != "$month" ]; }; then
  step "making $base with debootstrap from $mirror"
  rootfs=$(mktemp -d /var/tmp/sdgd-rootfs.XXXXXX)
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" \
    > "$work/debootstrap.log" 2>&1 || fail "debootstrap failed"
  cat > "$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
  # Slim, as Debian's own bookworm-slim: no documentation, manuals or
  # translations, now or in what the image's stages install.
  cat > "$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
SLIM
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright \
    -not -type d -delete
  rm -rf "$rootfs"/usr/share/{man,info,locale}/* \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . \
    | podman_ import --quiet --change "LABEL org.sdg.base=$month" - "$base" > /dev/null
  rm -rf "$rootfs"
  rootfs=
else
  step "using $base (${made:-from a registry})"
fi

# --- The image --------------------------------------------------------------
# A build killed midway (a CI timeout, a stopped machine) leaves buildah's
# working containers in podman's store; the images they hold cannot be
# pruned. They are removed here when no other build is running.
if ! pgrep -f 'podman .*build|buildah' > /dev/null; then
  podman_ ps -a --external --format '{{.ID}} {{.Names}}' \
    | awk '$2 ~ /-working-container$/ {print $1}' \
    | while read -r id; do
        step "removing $id, a working container left by a killed build"
        podman_ rm -f "$id" > /dev/null
      done
fi
step "building $image (both stages; the unit tests run in the first)"
start=$(date +%s)
podman_ build --pull=never --isolation chroot --network host \
  -f docker/Dockerfile -t "$image" . > "$work/build.log" 2>&1 \
  || fail "podman build failed"
# The build stage's image is left untagged; only its cached layers are kept.
# Tidying is not the check: an image another build still uses stays.
podman_ image prune -f > "$work/prune.log" 2>&1 \
  || step "kept untagged images in use: $(tail -1 "$work/prune.log")"
size=$(podman_ image inspect --format '{{.Size}}' "$image")
step "built in $(( $(date +%s) - start )) s; $image is $(( size / 1000000 )) MB"

# In the runtime stage: every library the binaries need, and nothing to
# build with.
podman_ run --rm "${run_flags[@]}" --image-volume ignore --entrypoint sh \
  "$image" -c '
  set -e
  for binary in /usr/local/bin/sdgd /usr/local/bin/sdgctl /usr/local/bin/llmsim; do
    libraries=$(ldd "$binary")
    if echo "$libraries" | grep -q "not found"; then
      echo "$binary: $(echo "$libraries" | grep "not found")"; exit 1
    fi
  done
  for tool in cc gcc g++ c++ cmake make ninja ld; do
    if command -v "$tool" > /dev/null; then echo "build tool in the image: $tool"; exit 1; fi
  done
  dev=$(dpkg-query -W -f "\${Package}\n" | grep -- "-dev$" || true)
  if [ -n "$dev" ]; then echo "-dev packages in the image: $dev"; exit 1; fi
' > "$work/runtime.log" 2>&1 || fail "the runtime stage: $(cat "$work/runtime.log")"
step "ldd finds every library of sdgd, sdgctl and llmsim; no compiler, no -dev package"

# --- Containers -------------------------------------------------------------
# generate_held SERVER OUTPUT LOG: sdgctl generate of rows.jsonl in the
# background (sdgctl_pid), against an llmsim that answers 10 requests of 4
# rows and never the next two; returns once the job holds at 40 rows.
generate_held() {
  "$sdgctl" generate --server="$1" --input="$work/rows.jsonl" \
    --output="$2" --template='Row {{i}}' --max_tokens=8 \
    --batch_size=4 --num_workers=2 --reconnect_for=120s > "$3" 2>&1 &
  sdgctl_pid=$!
  local progress=
  # `sdgctl jobs` columns: JOB_ID STATE TENANT ROWS SUCCEEDED ...
  for _ in $(seq 1 600); do
    progress=$("$sdgctl" jobs --server="$1" --state=running \
      2> /dev/null | awk 'NR > 1 && $5 == 40' || true)
    [ -n "$progress" ] && return 0
    sleep 0.1
  done
  fail "the job against $1 did not reach 40 committed rows"
}
# every_row_once FILE ROWS: FILE's lines have "i" 0..ROWS-1, each once.
every_row_once() {
  python3 - "$1" "$2" <<'PY'
import json, sys
seen = [json.loads(line)["i"] for line in open(sys.argv[1])]
rows = int(sys.argv[2])
if sorted(seen) != list(range(rows)):
    sys.exit(f"{len(seen)} lines, {len(set(seen))} distinct of {rows} rows")
PY
}
# start_llmsim NAME LOG [FLAGS...]: llmsim from the image, its port in LOG.
start_llmsim() {
  local name=$1 log=$2
  shift 2
  podman_ run --rm --name "$name" "${run_flags[@]}" --image-volume ignore \
    --entrypoint llmsim "$image" --listen=127.0.0.1:0 --model=sim-model "$@" > "$log" 2>&1 &
  pids+=($!)
}
# start_sdgd LOG: sdgd on the state volume, printing its ports to LOG.
# GRPC_PORT (0: any) and SIM_PORT must be set.
start_sdgd() {
  podman_ run --rm --name "$tag-sdgd" "${run_flags[@]}" \
    -v "$volume:/var/lib/sdgd" "$image" \
    --listen="127.0.0.1:$GRPC_PORT" --metrics_listen=127.0.0.1:0 \
    --backend="sim=http://127.0.0.1:$SIM_PORT/v1" --backend_batching=on \
    --state_dir=/var/lib/sdgd --shutdown_grace=5s > "$1" 2>&1 &
  pids+=($!)
  sdgd_pid=$!
}

podman_ volume create "$volume" > /dev/null
start_llmsim "$tag-llmsim" "$work/llmsim.log"
SIM_PORT=$(wait_for_port "$work/llmsim.log" "llmsim listening on") \
  || fail "llmsim did not start"
GRPC_PORT=0
start_sdgd "$work/sdgd.log"
GRPC_PORT=$(wait_for_port "$work/sdgd.log" "sdgd listening on") \
  || fail "sdgd did not start"
metrics_port=$(wait_for_port "$work/sdgd.log" "sdgd metrics on")

for name in llmsim sdgd; do
  uid=$(podman_ exec "$tag-$name" id -u)
  [ "$uid" = 10001 ] || fail "$name runs as uid $uid, not 10001"
  if podman_ exec "$tag-$name" touch /usr/local/bin/written 2> /dev/null; then
    fail "$name's root file system is writable"
  fi
done
step "sdgd and llmsim run as uid 10001 on a read-only root file system"

SDG_SMOKE_CLIENT=python deploy/smoke.sh "127.0.0.1:$GRPC_PORT" \
  > "$work/smoke.log" 2>&1 || fail "deploy/smoke.sh: $(cat "$work/smoke.log")"
step "deploy/smoke.sh passed (no model named: sdgd took llmsim's only one)"

curl -fsS "http://127.0.0.1:$metrics_port/metrics" > "$work/metrics.txt" \
  || fail "/metrics did not answer"
grep -q '^sdg_jobs_total{.*state="succeeded".*} 1$' "$work/metrics.txt" \
  || fail "/metrics does not count the smoke job: $(grep sdg_jobs_total "$work/metrics.txt")"
step "/metrics answers and counts the smoke test's job"

# SIGTERM: podman stop sends it and kills after -t seconds (exit 137), so an
# exit status of 0 is a clean exit within the grace.
podman_ stop -t 30 "$tag-sdgd" > /dev/null
status=0
wait "$sdgd_pid" || status=$?
[ "$status" = 0 ] || fail "sdgd exited with $status after SIGTERM"
step "podman stop: sdgd exited 0 within its grace period"

# A job interrupted by a kill resumes in a new container on the volume, and
# sdgctl, outside, reconnects and ends with every row once. The job is held
# mid-way without timing: this llmsim answers the first 10 requests (shards
# of 4 rows, one request each) and never the next two, so the job sits at
# 40 committed rows with two shards in flight when sdgd is killed.
rows=400
python3 -c "
import json
for i in range($rows): print(json.dumps({'i': i}))" > "$work/rows.jsonl"
start_llmsim "$tag-llmsim-2" "$work/llmsim-2.log" \
  --fault_script="$(printf 'ok,%.0s' {1..10})hang,hang"
SIM_PORT=$(wait_for_port "$work/llmsim-2.log" "llmsim listening on") \
  || fail "the second llmsim did not start"
start_sdgd "$work/sdgd-2.log"
wait_for_port "$work/sdgd-2.log" "sdgd listening on" > /dev/null \
  || fail "sdgd did not start on the volume"
generate_held "127.0.0.1:$GRPC_PORT" "$work/out.jsonl" "$work/sdgctl.log"
podman_ kill "$tag-sdgd" > /dev/null
wait "$sdgd_pid" || true
step "killed sdgd with 40 of $rows rows committed and two shards in flight"
start_sdgd "$work/sdgd-3.log"
status=0
wait "$sdgctl_pid" || status=$?
sdgctl_pid=
[ "$status" = 0 ] || fail "sdgctl generate failed: $(tail -5 "$work/sdgctl.log")"
grep -q "lost the stream of job" "$work/sdgctl.log" \
  || fail "sdgctl did not report losing the stream: $(cat "$work/sdgctl.log")"
grep -q "job resuming" "$work/sdgd-3.log" || fail "the new sdgd did not resume the job"
every_row_once "$work/out.jsonl" "$rows" || fail "the output is not every row once"
step "a new container on the volume resumed the job; sdgctl wrote all $rows rows once"

# docker/compose.yaml with Debian's podman-compose: llmsim and sdgd (the
# Prometheus and Grafana services need images from a registry). podman reads
# this VM's settings from CONTAINERS_CONF, since podman-compose passes no
# flags through; the dnsname plugin lets sdgd reach llmsim by name.
cat > "$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
export SDG_GRPC_PORT=$(free_port) SDG_METRICS_PORT=$(free_port)
compose() {
  CONTAINERS_CONF=$work/containers.conf podman-compose -p "$tag" \
    -f docker/compose.yaml "$@"
}
podman_ tag "$image" sdgd:local
compose up -d --no-build llmsim sdgd > "$work/compose.log" 2>&1 \
  || fail "podman-compose up failed"
for _ in $(seq 1 600); do
  podman_ logs "$tag"_sdgd_1 2>&1 | grep -q "^sdgd listening on" && break
  sleep 0.1
done
"$sdgctl" generate --server="127.0.0.1:$SDG_GRPC_PORT" \
  --input=examples/seed.jsonl --output="$work/compose-out.jsonl" \
  --block=examples/answer_block.json --model=sim-model \
  > "$work/compose-sdgctl.log" 2>&1 \
  || fail "sdgctl against compose's sdgd: $(tail -3 "$work/compose-sdgctl.log")"
lines=$(wc -l < "$work/compose-out.jsonl")
seeds=$(wc -l < examples/seed.jsonl)
[ "$lines" = "$seeds" ] || fail "compose's sdgd wrote $lines rows of $seeds"
# `down -v` removes the project's named volume; llmsim's anonymous one (the
# image declares VOLUME) goes by name.
anonymous=$(podman_ inspect --format '{{range .Mounts}}{{.Name}} {{end}}' \
  "$tag"_llmsim_1)
compose down -v > /dev/null 2>&1
[ -n "$anonymous" ] && podman_ volume rm $anonymous > /dev/null
step "podman-compose ran llmsim and sdgd from docker/compose.yaml; sdgctl generated $lines rows"

# docker/compose.postgresql.yaml: PostgreSQL from docker/postgres.Dockerfile
# (on the same base), llmsim and two sdgd replicas; compose.hold.yaml holds
# the job mid-way (llmsim answers 10 requests and never the next two).
# sdgctl is given both replicas; the active one is killed mid-job, the
# standby takes the lease and the job, and sdgctl ends with every row once.
podman_ build --quiet -f docker/postgres.Dockerfile -t sdgd-postgres:local . \
  > "$work/postgres-build.log" 2>&1 || fail "building docker/postgres.Dockerfile failed"
export SDG_GRPC_PORT_A=$(free_port) SDG_GRPC_PORT_B=$(free_port)
cat > "$work/compose.hold.yaml" <<HOLD
services:
  llmsim:
    command: ["--listen=0.0.0.0:8000", "--model=sim-model",
              "--fault_script=$(printf 'ok,%.0s' {1..10})hang,hang"]
  # Started here in order, so no restart: the killed replica stays dead and
  # the standby is the one that takes over.
  sdgd-a: {restart: "no"}
  sdgd-b: {restart: "no"}
HOLD
pg_tag=$tag-pg
pg_compose() {
  CONTAINERS_CONF=$work/containers.conf podman-compose -p "$pg_tag" \
    -f docker/compose.postgresql.yaml -f "$work/compose.hold.yaml" "$@"
}
# await_log CONTAINER TEXT: waits up to 60 s for TEXT in the container's log.
await_log() {
  for _ in $(seq 1 600); do
    podman_ logs "$1" 2>&1 | grep -qF "$2" && return 0
    sleep 0.1
  done
  fail "no '$2' in $1's log: $(podman_ logs "$1" 2>&1 | tail -5)"
}
pg_compose up -d --no-build postgres llmsim > "$work/pg-compose.log" 2>&1 \
  || fail "podman-compose up (postgres, llmsim) failed: $(tail -5 "$work/pg-compose.log")"
await_log "$pg_tag"_postgres_1 "database system is ready to accept connections"
pg_compose up -d --no-build sdgd-a >> "$work/pg-compose.log" 2>&1 \
  || fail "podman-compose up sdgd-a failed"
await_log "$pg_tag"_sdgd-a_1 "sdgd listening on"
pg_compose up -d --no-build sdgd-b >> "$work/pg-compose.log" 2>&1 \
  || fail "podman-compose up sdgd-b failed"
await_log "$pg_tag"_sdgd-b_1 "standby: another replica holds the lease"
step "podman-compose ran PostgreSQL, llmsim and two sdgd: sdgd-a active, sdgd-b a standby"

servers=ipv4:127.0.0.1:$SDG_GRPC_PORT_A,127.0.0.1:$SDG_GRPC_PORT_B
generate_held "$servers" "$work/pg-out.jsonl" "$work/pg-sdgctl.log"
podman_ kill "$pg_tag"_sdgd-a_1 > /dev/null
step "killed the active sdgd with 40 of $rows rows committed and two shards in flight"
status=0
wait "$sdgctl_pid" || status=$?
sdgctl_pid=
[ "$status" = 0 ] || fail "sdgctl generate against two replicas failed: $(tail -5 "$work/pg-sdgctl.log")"
await_log "$pg_tag"_sdgd-b_1 "replica lease taken: this replica is the active one"
await_log "$pg_tag"_sdgd-b_1 "job resuming"
every_row_once "$work/pg-out.jsonl" "$rows" \
  || fail "the output on PostgreSQL is not every row once"
# The anonymous volumes of the image's VOLUME (llmsim's, and the replicas'
# unused state_dir) go by name, as above.
pg_anonymous=$(for name in llmsim sdgd-a sdgd-b; do
  podman_ inspect --format '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}' \
    "$pg_tag"_${name}_1
done)
pg_compose down -v > /dev/null 2>&1
[ -n "$pg_anonymous" ] && podman_ volume rm $pg_anonymous > /dev/null
step "sdgd-b took over the job on PostgreSQL; sdgctl wrote all $rows rows once"
echo "check-image: every check passed ($image, $(( size / 1000000 )) MB)"
