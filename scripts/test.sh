#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source scripts/lib.sh
start=$(date +%s)

scripts/setup.sh test
command -v npm > /dev/null || scripts/setup.sh node
# The official openai npm package, pinned, for the Batch API's end-to-end
# tests (tests/e2e/openai/package-lock.json).
[ -d tests/e2e/openai/node_modules ] ||
  (cd tests/e2e/openai && npm ci --no-audit --no-fund --loglevel=error)

# A wrong-way include fails at once, before any build (the builds run the
# same check as their target check_layers).
scripts/check-layers.sh
# Every tracked C++ file as clang-format writes it (house style, rule 3).
scripts/check-format.sh

jobs=${SDG_BUILD_JOBS:-2}

use_ccache "$root"

# run_suite BUILD_DIR CTEST_ARGS... -- CMAKE_ARGS...
# Builds every target, or only SUITE_TARGETS when set.
run_suite() {
  local dir=$1
  shift
  local ctest_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do ctest_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  echo "=== $dir: configure and build"
  cmake -S . -B "$dir" -G Ninja "$@" > /dev/null
  local targets=()
  [ -n "${SUITE_TARGETS:-}" ] && targets=(--target $SUITE_TARGETS)
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
  echo "=== $dir: test"
  (cd "$dir" && ctest -j 2 --output-on-failure --timeout 600 "${ctest_args[@]}")
}

# The build/test suite includes the ops tests and, with them, image_check:
# the container image built with podman and run (several minutes; set
# SDG_IMAGE_CHECK=0 to leave it out while working on something else).
image_args=()
if [ "${SDG_IMAGE_CHECK:-1}" = 0 ]; then
  image_args=(-LE image)
  echo "=== image_check left out (SDG_IMAGE_CHECK=0)"
fi
run_suite build/test "${image_args[@]}" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDG_WERROR=ON
# clang-tidy over the production code, with build/test's compile commands
# (.clang-tidy; about 5 minutes on 2 cores; SDG_TIDY=0 skips it).
if [ "${SDG_TIDY:-1}" != 0 ]; then
  echo "=== clang-tidy"
  scripts/check-tidy.sh build/test
fi

# Sanitizer builds (SDG_SANITIZERS=0 skips them): AddressSanitizer + UBSan
# over the unit, integration, end-to-end and PostgreSQL store tests,
# ThreadSanitizer over the unit, integration and PostgreSQL store tests (the
# end-to-end tests run the same code in child processes). Tests that need
# PostgreSQL share one throwaway server, ctest's postgres fixture. The ops tests (deploy files, Prometheus) run once, above.
if [ "${SDG_SANITIZERS:-1}" != 0 ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # history_size=4: enough history that a report shows both stacks.
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$root/tests/tsan/suppressions.txt}
  run_suite build/asan -L "unit|integration|e2e|postgres" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDG_SANITIZE=address -DSDG_WERROR=ON
  # Only the test binaries those labels run (no sdgd, sdgctl or e2e tests).
  SUITE_TARGETS=in_process_tests run_suite build/tsan -L "unit|integration|postgres" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDG_SANITIZE=thread -DSDG_WERROR=ON
  # libFuzzer targets (clang, ASan + UBSan), each for SDG_FUZZ_SECONDS from
  # its committed seeds in tests/fuzz/corpus/; SDG_FUZZ=0 skips them.
  if [ "${SDG_FUZZ:-1}" != 0 ]; then
    echo "=== build/fuzz: configure and build (clang, libFuzzer)"
    cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DSDG_SANITIZE=fuzz -DSDG_WERROR=ON \
      -DSDG_FUZZ_SECONDS="${SDG_FUZZ_SECONDS:-30}" > /dev/null
    cmake --build build/fuzz -j "$jobs" --target fuzzers
    echo "=== build/fuzz: fuzz"
    rm -f build/fuzz/tests/fuzz/summary.txt
    (cd build/fuzz && ctest -j 2 -L fuzz --output-on-failure --timeout 600)
    cat build/fuzz/tests/fuzz/summary.txt
  fi
fi
echo "=== every stage passed in $(( $(date +%s) - start )) s${image_args:+ (image_check left out: SDG_IMAGE_CHECK=0)}"
command -v ccache > /dev/null && ccache -s | grep -E '^ *(Hits|Misses):' || true
