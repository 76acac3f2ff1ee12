#!/usr/bin/env bash
# bench/pg_compare.sh — two tallyd builds on PostgreSQL, one scenario of bench/load.lua, alternating.
# Not part of the test suite; never run by CI; prints figures and never fails on them.
#
#   bench/pg_compare.sh SCENARIO CONNS PREVIOUS_TALLYD NEW_TALLYD [ROUNDS]     (as root, after make)
#
# A throwaway PostgreSQL 15 cluster on 127.0.0.1:$PG_PORT (default 56499; shared_buffers=2GB,
# max_wal_size=8GB, checkpoint_timeout=30min, fsync and synchronous_commit on), then ROUNDS times
# (default 3): previous, new — each one node on a fresh database, wrk -t1 -cCONNS for
# BENCH_DURATION seconds (default 8) on 127.0.0.1. Prints each run's req/s and p50/p99, then the
# ratio new/previous of each pair and of their sums. The machine is shared: compare a run's own
# figures only. Every process it starts is stopped by its PID.
# BENCH_POLICIES_PREV / BENCH_POLICIES_NEW: item policies PUT before the load (as admin), as
# TARGET=JSON;TARGET=JSON, e.g. BENCH_POLICIES_NEW='*={"kinds":["like","dislike"]};p*={"max_kinds":1}'
# (load.lua's items are p<N>). A build without policies cannot take them: set only the new one's.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: bench/pg_compare.sh SCENARIO CONNS PREVIOUS_TALLYD NEW_TALLYD [ROUNDS]" >&2; exit 2; }
SCEN=$1 CONNS=$2 PREV=$3 NEW=$4 ROUNDS=${5:-3}
DUR=${BENCH_DURATION:-8} PORT=${PG_PORT:-56499}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)
for b in "$PREV" "$NEW"; do [ -x "$b" ] || { echo "$b is not an executable" >&2; exit 2; }; done
[ -x "$PGBIN/initdb" ] && command -v wrk >/dev/null || { echo "needs postgresql and wrk" >&2; exit 2; }
W=$(mktemp -d /tmp/tally-pgcompare.XXXXXX)
chmod 755 "$W"
TP=
cleanup() {
    [ -n "$TP" ] && kill "$TP" 2>/dev/null && wait "$TP" 2>/dev/null
    [ -f "$W/pg/data/postmaster.pid" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -m fast -w -t 60 stop >/dev/null 2>&1
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/pg/data" "$W/pg/sock"
chown -R postgres:postgres "$W/pg"
runuser -u postgres -- "$PGBIN/initdb" -D "$W/pg/data" -A trust -E UTF8 --no-locale >/dev/null || exit 1
cat >>"$W/pg/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$W/pg/sock'
shared_buffers = 2GB
max_wal_size = 8GB
checkpoint_timeout = 30min
CONF
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -l "$W/pg/server.log" -w -t 60 start >/dev/null || exit 1
P() { psql -h 127.0.0.1 -p "$PORT" -U postgres -qtAX "$@"; }

# PUT each TARGET=JSON of $2 (;-separated) as a policy on 127.0.0.1:$1; fails the run if one is refused
put_policies() {
    local port=$1 spec=$2 one target body
    local IFS=';'
    for one in $spec; do
        [ -n "$one" ] || continue
        target=${one%%=*} body=${one#*=}
        curl -sf -o /dev/null -X PUT -H 'X-User-Id: admin' -H 'Content-Type: application/json' \
            --data "$body" "http://127.0.0.1:$port/v1/admin/policies/${target//\*/%2A}" ||
            { echo "policy $target=$body was refused" >&2; return 1; }
    done
}

# one run of BIN on a fresh database (POLICIES put first); leaves "rps p50_ms p99_ms" in $W/line
run() {
    local bin=$1 db=$2 policies=${3:-} port=""
    P -c "CREATE DATABASE $db" >/dev/null || exit 1
    "$bin" --listen 127.0.0.1:0 --store "postgresql://postgres@127.0.0.1:$PORT/$db" \
        --rate-limit off --read-rate-limit off >"$W/out" 2>"$W/err" &
    TP=$!
    for _ in $(seq 1 200); do
        port=$(grep -o 'http://127.0.0.1:[0-9]*' "$W/out" 2>/dev/null | head -1 | sed 's/.*://')
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { cat "$W/err" >&2; exit 1; } # cleanup stops it
    for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break; sleep 0.05; done
    [ -z "$policies" ] || put_policies "$port" "$policies" || exit 1 # cleanup stops it
    wrk -t1 -c"$CONNS" -d"${DUR}s" --latency --timeout 10s -s bench/load.lua "http://127.0.0.1:$port" -- \
        "$SCEN" tally "$W/r" "$RANDOM" >/dev/null 2>&1
    kill "$TP"
    wait "$TP" 2>/dev/null
    TP=
    P -c "DROP DATABASE $db" >/dev/null
    awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); r[kv[1]] = kv[2]}}
         END {printf "%.0f %.2f %.2f", r["rps"], r["p50_us"] / 1000, r["p99_us"] / 1000}' "$W/r.result" >"$W/line"
}

echo "bench/pg_compare.sh $SCEN $CONNS: $(date -u +%FT%TZ), PostgreSQL $(P -c 'SHOW server_version'), wrk -t1 -c$CONNS -d${DUR}s"
[ -z "${BENCH_POLICIES_PREV:-}${BENCH_POLICIES_NEW:-}" ] ||
    echo "policies: previous build '${BENCH_POLICIES_PREV:-}', this build '${BENCH_POLICIES_NEW:-}'"
sum_p=0 sum_n=0 ratios=""
for i in $(seq 1 "$ROUNDS"); do
    run "$PREV" "prev$i" "${BENCH_POLICIES_PREV:-}"
    read -r rp pp50 pp99 <"$W/line"
    printf 'previous build  %8s req/s  p50 %6s ms  p99 %6s ms\n' "$rp" "$pp50" "$pp99"
    run "$NEW" "new$i" "${BENCH_POLICIES_NEW:-}"
    read -r rn np50 np99 <"$W/line"
    printf 'this build      %8s req/s  p50 %6s ms  p99 %6s ms\n' "$rn" "$np50" "$np99"
    sum_p=$((sum_p + rp)) sum_n=$((sum_n + rn))
    ratios="$ratios $(awk -v a="$rn" -v b="$rp" 'BEGIN {printf "%.2f", b ? a / b : 0}')"
done
echo "ratios (this/previous) of each pair:$ratios; of the sums: $(awk -v a=$sum_n -v b=$sum_p 'BEGIN {printf "%.2f", b ? a / b : 0}')"
