#!/usr/bin/env bash
# Installs the Debian 12 packages sdgd needs (scripts/packages.txt), only if
# some are missing. Safe to run again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=()
while read -r line; do
  line=${line%%#*}
  for word in $line; do packages+=("$word"); done
done < "$here/packages.txt"

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
