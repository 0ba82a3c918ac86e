#!/usr/bin/env bash
# Fails when a source file includes a header of a layer it may not use, so
# that the folder tree keeps reading as DESIGN.md's data flow:
#   api -> service -> scheduling -> jobs -> store;  service -> jobs, store;
#   jobs -> pipeline;  scheduling -> pipeline;  scheduling -> backend ->
#   http; observability and base are usable from every layer of sdgd; store
#   and pipeline know nothing of each other, of jobs, backend, scheduling,
#   service or api; jobs and backend know nothing of each other; api reaches
#   the layers below only through the service.
# The build runs it (target check_layers), so a wrong-way include fails
# `cmake --build`.  Usage: scripts/check-layers.sh [SOURCE_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# FOLDER: the project folders its files may include from. Headers from
# outside the project (absl/, grpcpp/, sdg/v1/ generated code...) are not
# checked. More specific folders come first.
rules=(
  "base/:base/"
  "server/observability/:base/ server/observability/"
  "server/http/:base/ server/http/"
  "server/backend/:base/ server/observability/ server/http/ server/backend/"
  "server/store/:base/ server/observability/ server/store/"
  "server/pipeline/:base/ server/pipeline/"
  "server/jobs/:base/ server/observability/ server/store/ server/pipeline/ server/jobs/"
  "server/scheduling/:base/ server/observability/ server/pipeline/ server/jobs/ server/backend/ server/scheduling/"
  "server/service/:base/ server/observability/ server/store/ server/jobs/ server/scheduling/ server/service/"
  # api: the service, and two types the service hands it: a Job (to watch
  # and cancel the job a call streams) and the event-log reader a stream
  # sends from. Never the store's writers nor the scheduler.
  "server/api/:base/ server/observability/ server/service/ server/jobs/job.h server/store/event_log.h server/api/"
  "server/:base/ server/"
  "client/:base/ client/"
  "tools/llmsim/:base/ tools/llmsim/"
)
# Include prefixes that name project folders (anything else is external).
project_prefixes="base/ server/ client/ tools/ tests/ bench/"

allowed_for() {
  local file=$1 rule
  for rule in "${rules[@]}"; do
    if [[ $file == "${rule%%:*}"* ]]; then
      echo "${rule#*:}"
      return
    fi
  done
}

is_project_include() {
  local header=$1 prefix
  for prefix in $project_prefixes; do
    [[ $header == "$prefix"* ]] && return 0
  done
  return 1
}

violations=0
while IFS= read -r file; do
  allowed=$(allowed_for "$file")
  [ -n "$allowed" ] || continue
  while IFS=: read -r line header; do
    is_project_include "$header" || continue
    ok=0
    for prefix in $allowed; do
      if [[ $header == "$prefix"* ]]; then ok=1; break; fi
    done
    if [ $ok = 0 ]; then
      echo "$file:$line: includes \"$header\", but ${file%/*}/ may include only: $allowed" >&2
      violations=$((violations + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
           sed 's/^\([0-9]*\):.*"\([^"]*\)".*/\1:\2/')
done < <(find base server client tools/llmsim -name '*.h' -o -name '*.cc' | sort)

if [ $violations -gt 0 ]; then
  echo "check-layers: $violations include(s) climb a layer; see DESIGN.md's Layout" >&2
  exit 1
fi
echo "check-layers: every include follows the layers"
