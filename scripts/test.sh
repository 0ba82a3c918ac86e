#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/setup.sh

jobs=${SDG_BUILD_JOBS:-2}

# run_suite BUILD_DIR CTEST_ARGS... -- CMAKE_ARGS...
run_suite() {
  local dir=$1
  shift
  local ctest_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do ctest_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  echo "=== $dir: configure and build"
  cmake -S . -B "$dir" -G Ninja "$@" > /dev/null
  cmake --build "$dir" -j "$jobs"
  echo "=== $dir: test"
  (cd "$dir" && ctest -j 2 --output-on-failure --timeout 600 "${ctest_args[@]}")
}

run_suite build/test -- -DCMAKE_BUILD_TYPE=RelWithDebInfo
