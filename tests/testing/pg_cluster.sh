#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests: initdb in a new temporary directory,
# postgres listening on a free loopback port (and a socket in that
# directory), never the machine's own cluster.
#   pg_cluster.sh start STATE_FILE   starts one and writes STATE_FILE:
#                                    PGDATA=, PGPORT=, PGUSER=, PGPASSWORD=
#   pg_cluster.sh start-tls STATE_FILE  the same, with TLS: a certificate
#                                    for `localhost` from a CA made here;
#                                    STATE_FILE adds PGSSLROOTCERT= (that
#                                    CA) and OTHER_CA= (one that signed
#                                    nothing this server has)
#   pg_cluster.sh stop STATE_FILE    stops it (by its pid, through pg_ctl)
#                                    and removes its directory
#   pg_cluster.sh pause STATE_FILE   stops the server (pg_ctl -m fast), keeping
#                                    its data: a database outage
#   pg_cluster.sh resume STATE_FILE  starts it again on the same port
#   pg_cluster.sh psql STATE_FILE ARGS...  runs its version's psql
# make_tls DIR: the CAs and the server's certificate and key, in DIR.
make_tls() {
  local dir=$1
  mkdir -p "$dir"
  for ca in ca other-ca; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -nodes -days 2 -subj "/CN=sdg-test-$ca" -keyout "$dir/$ca.key" \
      -out "$dir/$ca.crt" 2> /dev/null
  done
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj /CN=localhost -keyout "$dir/server.key" -out "$dir/server.csr" \
    2> /dev/null
  printf 'subjectAltName=DNS:localhost\n' > "$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" \
    -CAkey "$dir/ca.key" -CAcreateserial -days 2 -extfile "$dir/server.ext" \
    -out "$dir/server.crt" 2> /dev/null
  chmod 600 "$dir/server.key"
}

# Passwords are required on TCP (scram-sha-256), as in production. As root,
# the server runs as the `postgres` user (initdb refuses root).
set -euo pipefail

command=${1:?usage: pg_cluster.sh start|stop|pause|resume STATE_FILE}
state=${2:?usage: pg_cluster.sh start|stop|pause|resume STATE_FILE}

bindir=$(pg_config --bindir 2> /dev/null || true)
if [ ! -x "$bindir/initdb" ]; then
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2> /dev/null | sort -V | tail -n 1)
fi
if [ ! -x "$bindir/initdb" ]; then
  echo "pg_cluster: no initdb; install postgresql-15 (scripts/setup.sh test)" >&2
  exit 1
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# start_server ROOT PORT: postgres on 127.0.0.1:PORT, its socket in ROOT.
start_server() {
  as_owner "$bindir/pg_ctl" start -D "$1/data" -w -t 60 -l "$1/server.log" \
    -o "-p $2 -k $1 -c listen_addresses=127.0.0.1 -c max_connections=200" \
    > /dev/null 2>&1
}

state_value() { sed -n "s/^$1=//p" "$state"; }

stop() {
  [ -f "$state" ] || return 0
  local data
  data=$(sed -n 's/^PGDATA=//p' "$state")
  if [ -n "$data" ] && [ -f "$data/postmaster.pid" ]; then
    as_owner "$bindir/pg_ctl" stop -D "$data" -m immediate -w > /dev/null 2>&1 || true
  fi
  [ -n "$data" ] && rm -rf "$(dirname "$data")"
  rm -f "$state"
}

case "$command" in
  stop)
    stop
    ;;
  psql)
    shift 2
    exec "$bindir/psql" "$@"
    ;;
  pause)
    as_owner "$bindir/pg_ctl" stop -D "$(state_value PGDATA)" -m fast -w > /dev/null
    ;;
  resume)
    data=$(state_value PGDATA)
    start_server "$(dirname "$data")" "$(state_value PGPORT)" || {
      cat "$(dirname "$data")/server.log" >&2
      exit 1
    }
    ;;
  start | start-tls)
    stop  # a cluster left by an interrupted run
    root=$(mktemp -d /tmp/sdg-pg.XXXXXX)
    chmod 755 "$root"
    data=$root/data
    password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    printf '%s\n' "$password" > "$root/password"
    if [ "$(id -u)" -eq 0 ]; then chown -R postgres "$root"; fi
    as_owner "$bindir/initdb" -D "$data" -U sdg --pwfile="$root/password" \
      --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
      > "$root/initdb.log" 2>&1 || {
      cat "$root/initdb.log" >&2
      exit 1
    }
    tls_state=
    if [ "$command" = start-tls ]; then
      make_tls "$root/tls"
      if [ "$(id -u)" -eq 0 ]; then chown -R postgres "$root/tls"; fi
      printf "ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n" \
        "$root/tls/server.crt" "$root/tls/server.key" >> "$data/postgresql.conf"
      tls_state=$(printf 'PGSSLROOTCERT=%s\nOTHER_CA=%s\n' \
        "$root/tls/ca.crt" "$root/tls/other-ca.crt")
    fi
    for attempt in 1 2 3 4 5; do
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      if start_server "$root" "$port"; then
        printf 'PGDATA=%s\nPGPORT=%s\nPGUSER=sdg\nPGPASSWORD=%s\n' \
          "$data" "$port" "$password" > "$state"
        [ -n "$tls_state" ] && printf '%s\n' "$tls_state" >> "$state"
        exit 0
      fi
    done
    echo "pg_cluster: postgres did not start; its log:" >&2
    cat "$root/server.log" >&2
    exit 1
    ;;
  *)
    echo "usage: pg_cluster.sh start|start-tls|stop|pause|resume STATE_FILE" >&2
    exit 2
    ;;
esac
