#!/usr/bin/env bash
# A local PostgreSQL server for trying many workers (Debian: apt-get install postgresql).
#   scripts/postgres.sh start [DIR] [PORT]   initdb on first use, start, print the --db URL
#   scripts/postgres.sh stop  [DIR]
# The server listens on 127.0.0.1 only and trusts local connections: for trying, not for a
# shared deployment. As root it runs as the `postgres` user (the server refuses root).
set -euo pipefail
cmd=${1:-start}; dir=${2:-.arbiter-postgres}; port=${3:-5433}
initdb=$(command -v initdb || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$initdb" ]; then
  echo "scripts/postgres.sh: no PostgreSQL server here (Debian: apt-get install postgresql)" >&2
  exit 1
fi
bin=$(dirname "$(readlink -f "$initdb")")
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
as=()
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; as=(runuser -u postgres --); fi
case "$cmd" in
  start)
    [ -f "$dir/PG_VERSION" ] || "${as[@]}" "$bin/initdb" -D "$dir" -U arbiter --auth=trust \
      -E UTF8 --no-instructions >/dev/null
    "${as[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    "${as[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U arbiter arbiter 2>/dev/null || true
    echo "postgresql+psycopg://arbiter@127.0.0.1:$port/arbiter" ;;
  stop)
    "${as[@]}" "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null ;;
  *)
    echo "usage: scripts/postgres.sh start|stop [DIR] [PORT]" >&2; exit 2 ;;
esac
