#!/bin/sh
# Starts PostgreSQL on $PGDATA, first creating the cluster if it is empty:
# the user sdgd (password from POSTGRES_PASSWORD) owning the database sdgd,
# reachable over TCP with scram-sha-256 only. Extra arguments go to postgres
# (e.g. -c port=5433).
set -eu
bin=/usr/lib/postgresql/15/bin
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || {
    echo "postgres-entrypoint: set POSTGRES_PASSWORD (sdgd's password)" >&2
    exit 1
  }
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  "$bin/initdb" --pgdata="$PGDATA" --username=sdgd --pwfile="$pwfile" \
    --auth-local=peer --auth-host=scram-sha-256 --encoding=UTF8 \
    --locale=C.UTF-8 > /dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "CREATE DATABASE sdgd OWNER sdgd" \
    | "$bin/postgres" --single -D "$PGDATA" postgres > /dev/null
  echo "postgres-entrypoint: created the cluster, user sdgd, database sdgd"
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' \
  -c unix_socket_directories= "$@"
