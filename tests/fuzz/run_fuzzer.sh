#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time and appends a one-line
# summary (executions, executions per second, coverage) to SUMMARY.
#   run_fuzzer.sh FUZZER SECONDS FOUND_DIR SEED_DIR SUMMARY
set -uo pipefail
fuzzer=$1 seconds=$2 found=$3 seeds=$4 summary=$5
name=$(basename "$fuzzer")
log="$found.log"
# FOUND_DIR first: libFuzzer writes new inputs to the first directory only,
# so the committed seeds stay as they are.
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$(dirname "$fuzzer")/$name-" \
  "$found" "$seeds" > "$log" 2>&1
rc=$?
stat() { grep -m1 "^stat::$1:" "$log" | awk '{print $2}'; }
done_line=$(grep -E '^#[0-9]+\s+DONE' "$log" | tail -1)
cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<< "$done_line")
features=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<< "$done_line")
corpus=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<< "$done_line")
line="$name: $(stat number_of_executed_units) runs in ${seconds} s, $(stat average_exec_per_sec) exec/s, coverage ${cov:-?} edges, ${features:-?} features, corpus ${corpus:-?} inputs"
if [ $rc -ne 0 ]; then
  line="$name: FAILED (exit $rc); see $log and $(dirname "$fuzzer")/$name-*"
  tail -40 "$log"
fi
echo "$line"
echo "$line" >> "$summary"
exit $rc
