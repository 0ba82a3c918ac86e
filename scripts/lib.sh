# Helpers shared by the scripts: ccache's settings, and reading the port of a
# server that prints "... listening on HOST:PORT".

# ccache (scripts/packages.txt) serves every build of the scripts and every
# later run on this machine. Its cache lives outside the clone, and paths are
# hashed relative to the clone, so a fresh clone in another folder reuses it.
use_ccache() {
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/sdgd-ccache}
  export CCACHE_BASEDIR=$1
  export CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
}

# wait_for_port FILE PREFIX: prints the port from the first line of FILE that
# starts with PREFIX, waiting up to 60 s for the server to write it.
wait_for_port() {
  local file=$1 prefix=$2 line
  for _ in $(seq 1 600); do
    line=$(grep -m1 "^$prefix" "$file" 2>/dev/null || true)
    if [ -n "$line" ]; then
      echo "${line##*:}"
      return 0
    fi
    sleep 0.1
  done
  echo "no '$prefix' line in $file after 60 s" >&2
  return 1
}
