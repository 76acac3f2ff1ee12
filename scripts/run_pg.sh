#!/usr/bin/env bash
# run_pg.sh — try tally on PostgreSQL: a throwaway local PostgreSQL 15 and two tallyd nodes on
# one database (127.0.0.1:8081 and :8082), in development mode (X-User-Id). Ctrl-C stops
# everything and removes the temporary directory. `make run-pg` builds first and runs this.
#
#   NODE_A_PORT, NODE_B_PORT   the nodes' ports (default 8081, 8082)
#   TALLY_PG_BIN               PostgreSQL binaries (default /usr/lib/postgresql/15/bin)
#   TALLY_PG_KEEP=1            keep the temporary directory (data, logs) after Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."

PGBIN=${TALLY_PG_BIN:-/usr/lib/postgresql/15/bin}
NODE_A_PORT=${NODE_A_PORT:-8081}
NODE_B_PORT=${NODE_B_PORT:-8082}
TALLYD=${TALLYD:-build/tallyd}
DB=tally

die() { echo "run_pg.sh: $*" >&2; exit 1; }
[ -x "$TALLYD" ] || die "$TALLYD is missing: run make first (or make run-pg)"
for b in initdb pg_ctl psql; do
    [ -x "$PGBIN/$b" ] || die "$PGBIN/$b is missing: install postgresql-15 (make deps)"
done

# PostgreSQL refuses to run as root: as root, its commands run as the postgres user.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

tmp=$(mktemp -d /tmp/tally-run-pg-XXXXXX)
mkdir "$tmp/sock"
[ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$tmp"
node_pids=()
pg_started=0

cleanup() {
    trap - INT TERM EXIT
    echo
    echo "stopping..."
    for pid in "${node_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${node_pids[@]}"; do  # bounded: 10 s each, then SIGKILL
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$pg_started" -eq 1 ]; then
        as_pg "$PGBIN/pg_ctl" -D "$tmp/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
    fi
    if [ -n "${TALLY_PG_KEEP:-}" ]; then
        echo "kept $tmp (data, server.log, node-a.log, node-b.log)"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A free port on 127.0.0.1 for PostgreSQL.
pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

echo "PostgreSQL 15: initdb in $tmp/data, port $pg_port (127.0.0.1 only, trust authentication)"
as_pg "$PGBIN/initdb" -D "$tmp/data" -A trust -U postgres -E UTF8 --no-locale >"$tmp/initdb.log" 2>&1 ||
    { cat "$tmp/initdb.log" >&2; die "initdb failed"; }
cat >>"$tmp/data/postgresql.conf" <<CONF
# scripts/run_pg.sh: a throwaway server for trying tally
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$tmp/sock'
max_connections = 200
shared_buffers = '64MB'
CONF
as_pg "$PGBIN/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 start >/dev/null ||
    { tail -20 "$tmp/server.log" >&2; die "PostgreSQL did not start"; }
pg_started=1
"$PGBIN/psql" -X -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "CREATE DATABASE $DB"
uri="postgresql://postgres@127.0.0.1:$pg_port/$DB?connect_timeout=2"

# Starts one node; waits (bounded) for its "listening on" line.
start_node() {
    local name=$1 port=$2 log="$tmp/node-$1.log"
    "$TALLYD" --listen "127.0.0.1:$port" --store "$uri" >"$log" 2>&1 &
    local pid=$!
    node_pids+=("$pid")
    for _ in $(seq 200); do  # 20 s
        grep -q "listening on" "$log" 2>/dev/null && { echo "node $name: pid $pid, http://127.0.0.1:$port (log $log)"; return 0; }
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "node $name exited before listening; its output:" >&2
            sed 's/^/    /' "$log" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "node $name did not listen within 20 s; its output:" >&2
    sed 's/^/    /' "$log" >&2
    return 1
}
start_node a "$NODE_A_PORT" || exit 1
start_node b "$NODE_B_PORT" || exit 1

cat <<EOF

Two tallyd nodes share database "$DB" on $uri
Development mode: the user is the X-User-Id header, admin is X-User-Id: admin. Try:

  J='Content-Type: application/json'
  curl -s -X PUT -H "\$J" -H 'X-User-Id: alice' -d '{"reaction":"like"}' http://127.0.0.1:$NODE_A_PORT/v1/items/post-1/reaction
  curl -s http://127.0.0.1:$NODE_B_PORT/v1/items/post-1                  # the other node sees it
  curl -si -X POST -H "\$J" -H 'X-User-Id: bob' -H 'Idempotency-Key: k1' -d '{"reaction":"like"}' \\
       http://127.0.0.1:$NODE_B_PORT/v1/items/post-1/reaction:toggle     # once more, on :$NODE_A_PORT too: replayed
  curl -s -H 'X-User-Id: admin' http://127.0.0.1:$NODE_A_PORT/v1/changes  # one change feed for both nodes
  curl -s -X POST -H "\$J" -H 'X-User-Id: admin' -d '{}' http://127.0.0.1:$NODE_B_PORT/v1/admin/recount
  $PGBIN/psql -h 127.0.0.1 -p $pg_port -U postgres $DB            # the tables

Ctrl-C stops both nodes and PostgreSQL and removes $tmp.
EOF

# Until Ctrl-C, or until a node dies by itself (then say so and stop the rest).
while :; do
    for i in "${!node_pids[@]}"; do
        if ! kill -0 "${node_pids[$i]}" 2>/dev/null; then
            name=$([ "$i" -eq 0 ] && echo a || echo b)
            echo "node $name (pid ${node_pids[$i]}) exited; the end of its log:" >&2
            tail -20 "$tmp/node-$name.log" | sed 's/^/    /' >&2
            exit 1
        fi
    done
    sleep 1
done
