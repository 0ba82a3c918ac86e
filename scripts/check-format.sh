#!/usr/bin/env bash
# Fails, naming each file, when a tracked C++ file is not as clang-format
# (.clang-format: Google style) writes it. Fix with:
#   git ls-files '*.cc' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=()
while read -r file; do
  if ! clang-format --dry-run -Werror "$file" > /dev/null 2>&1; then
    unformatted+=("$file")
  fi
done < <(git ls-files '*.cc' '*.h')
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check-format: not clang-formatted: ${unformatted[*]}" >&2
  echo "check-format: run: git ls-files '*.cc' '*.h' | xargs clang-format -i" >&2
  exit 1
fi
echo "check-format: every tracked C++ file is clang-formatted"
