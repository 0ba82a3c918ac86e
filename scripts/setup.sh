#!/usr/bin/env bash
# Installs Debian 12 packages, only those missing; safe to run again.
#   scripts/setup.sh [LIST...]
# LIST names scripts/packages-LIST.txt; with none, scripts/packages.txt (what
# building sdgd and its unit tests need) alone. Lists: test (what the
# operations tests start or run), image (scripts/check-image.sh: podman and
# what it needs), bench (the benchmarks' backends, Python references and
# chart).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

lists=("$here/packages.txt")
for name in "$@"; do lists+=("$here/packages-$name.txt"); done
packages=()
for list in "${lists[@]}"; do
  while read -r line; do
    line=${line%%#*}
    for word in $line; do packages+=("$word"); done
  done < "$list"
done

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
