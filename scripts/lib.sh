# Helpers shared by the scripts: start a server that prints
# "... listening on HOST:PORT" and read its port.

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
