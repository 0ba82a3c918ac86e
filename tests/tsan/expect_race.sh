#!/usr/bin/env bash
# Runs the race canary under the project's TSAN_OPTIONS (suppressions
# included) and passes only if ThreadSanitizer reports its race in our
# reactor callback.  Usage: expect_race.sh CANARY_BINARY SUPPRESSIONS_FILE
set -uo pipefail
output=$(TSAN_OPTIONS="halt_on_error=1:suppressions=$2" "$1" 2>&1)
if grep -Eq "SUMMARY: ThreadSanitizer: data race .*race_canary.cc:[0-9]+ in OnWriteDone" <<< "$output"; then
  echo "expect_race: the canary's race in OnWriteDone was reported"
  exit 0
fi
echo "$output"
echo "expect_race: ThreadSanitizer did not report the canary's race in" \
     "OnWriteDone; a suppression hides races in our code" >&2
exit 1
