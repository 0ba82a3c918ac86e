#!/usr/bin/env bash
# clang-tidy (.clang-tidy: bug patterns, needless copies, function length)
# over every tracked .cc of base/, server/, client/ and tools/, with the
# compile commands of BUILD_DIR (a configured and built build/test: the
# generated protobuf headers must exist). Fails naming each finding.
# Tests and benchmarks are left out: tidy costs about as much as a compile,
# and over the production code alone it takes ~5 minutes on 2 cores.
# Usage: scripts/check-tidy.sh [BUILD_DIR]   (default build/test)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/test}
jobs=${SDG_BUILD_JOBS:-2}
mapfile -t files < <(git ls-files 'base/*.cc' 'server/*.cc' 'client/*.cc' 'tools/*.cc')
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# -Wno-error: the builds' -Werror would turn a compiler warning in a
# generated gRPC header into an error no Checks entry can turn off;
# .clang-tidy's WarningsAsErrors decides what fails instead.
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -n 4 clang-tidy -p "$build" --quiet --extra-arg=-Wno-error > "$log" 2>&1 || status=$?
if [ "$status" != 0 ] || grep -q 'warning:\|error:' "$log"; then
  grep -E 'warning:|error:' "$log" | sed "s|$PWD/||" | sort -u >&2
  echo "check-tidy: clang-tidy found the above (.clang-tidy says what each check is for)" >&2
  exit 1
fi
echo "check-tidy: clang-tidy found nothing in ${#files[@]} files"
