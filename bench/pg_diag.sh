#!/usr/bin/env bash
# bench/pg_diag.sh — where tally's time goes on PostgreSQL (the evidence beside bench/pg_bench.sh's
# figures). Not part of the test suite; its rates are not figures (pg_stat_statements with
# track_planning, perf and the samplers all cost CPU): read the per-statement counts and ratios.
#
#   bench/pg_diag.sh [SECONDS]           (from the project root, after make; run as root)
#
# A throwaway cluster with pg_bench.sh's settings plus pg_stat_statements (track_planning = on), on
# 127.0.0.1:$PG_PORT (default 56433). Then:
#   1. keyed writes, 1 node (wrk -c64): pg_stat_statements per statement (calls per COMMIT, plan and
#      execution ms per call, WAL records and bytes per call), perf of the whole machine by process
#      and symbol; then the peers' B_zipf.sql under pgbench the same way
#   2. keyed writes, 2 nodes on one database: what the sessions that wait on a lock are running, and
#      what the session that blocks them runs (pg_blocking_pids), sampled every 0.1 s
#   3. the feed page's statement as tally sends it (literal ids, simple protocol): planning and
#      execution time (EXPLAIN ANALYZE); the same under a prepared statement with parameters
set -u
{
cd "$(dirname "$0")/.."
SECS=${1:-8}
PORT=${PG_PORT:-56433}
PEERS=$(cd "${PEERS:?set PEERS to the folder of the peer scripts}" && pwd) || exit 2
PGBIN=/usr/lib/postgresql/15/bin
W=$(mktemp -d /tmp/tally-pgdiag.XXXXXX)
chmod 755 "$W"
cp build/tallyd "$W/bench-tallyd"
NODE_PIDS=()
cleanup() {
    set +e
    for p in "${NODE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    runuser -u postgres -- $PGBIN/pg_ctl -D "$W/pg/data" -m fast -w -t 60 stop >/dev/null 2>&1
    if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
P() { psql -h 127.0.0.1 -p "$PORT" -U postgres -qtAX "$@"; }
mkdir -p "$W/pg/data" "$W/pg/sock"
chown -R postgres:postgres "$W/pg"
runuser -u postgres -- $PGBIN/initdb -D "$W/pg/data" -A trust -E UTF8 --no-locale >/dev/null || exit 1
cat >>"$W/pg/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$W/pg/sock'
max_connections = 100
shared_buffers = 2GB
max_wal_size = 8GB
checkpoint_timeout = 30min
track_wal_io_timing = on
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track_planning = on
CONF
runuser -u postgres -- $PGBIN/pg_ctl -D "$W/pg/data" -l "$W/pg/server.log" -w -t 60 start >/dev/null || exit 1
P -c "CREATE DATABASE bench" -c "CREATE DATABASE t1" -c "CREATE DATABASE t2" >/dev/null
P -d bench -v ON_ERROR_STOP=1 -f "$PEERS/pg_schema.sql" >/dev/null
P -d bench -c "ALTER TABLE reactions DISABLE TRIGGER reactions_counts" >/dev/null
for d in bench t1 t2; do P -d $d -c "CREATE EXTENSION pg_stat_statements" >/dev/null; done

start_nodes() { # N DB
    NODE_PIDS=() URLS=()
    local i port
    for i in $(seq 1 "$1"); do
        "$W/bench-tallyd" --listen 127.0.0.1:0 --store "postgresql://postgres@127.0.0.1:$PORT/$2" \
            --rate-limit off --read-rate-limit off >"$W/n$i.out" 2>"$W/n$i.err" &
        NODE_PIDS+=($!)
        port=""
        for _ in $(seq 1 200); do
            port=$(grep -o 'http://127.0.0.1:[0-9]*' "$W/n$i.out" 2>/dev/null | head -1 | sed 's/.*://')
            [ -n "$port" ] && break
            sleep 0.05
        done
        [ -n "$port" ] || { cat "$W/n$i.err" >&2; exit 1; }
        URLS+=("http://127.0.0.1:$port")
    done
}
stop_nodes() { for p in "${NODE_PIDS[@]}"; do kill -TERM "$p"; wait "$p" 2>/dev/null; done; NODE_PIDS=(); }
statements() { # DB: per statement, against the number of COMMITs
    P -d "$1" -F' | ' -c "WITH s AS (SELECT * FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$1')),
        c AS (SELECT greatest(sum(calls) FILTER (WHERE query ILIKE 'commit%'), 1) AS n FROM s)
      SELECT round(calls / c.n, 2) AS per_commit, calls, round((total_plan_time / calls)::numeric, 3) AS plan_ms,
             round((total_exec_time / calls)::numeric, 3) AS exec_ms, round(wal_records::numeric / calls, 1) AS wal_rec,
             round(wal_bytes::numeric / calls) AS wal_b, round(wal_fpi::numeric / calls, 1) AS fpi,
             regexp_replace(left(query, 90), '\s+', ' ', 'g')
      FROM s, c WHERE calls > 50 ORDER BY total_plan_time + total_exec_time DESC LIMIT 14"
}
perf_top() { # OUT: perf of the whole machine for SECS/2 s: shares by process, then the top symbols of postgres and tallyd
    timeout $((SECS + 20)) perf record -F 499 -a -g -o "$1" -- sleep $((SECS / 2)) >/dev/null 2>&1
    echo "  by process (share of all samples):"
    perf report -i "$1" --no-children --sort comm --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -8 | sed 's/^/   /'
    echo "  postgres, by symbol:"
    perf report -i "$1" --no-children --comms postgres --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9.]+%' | head -14 | sed 's/^/   /'
}

echo "== 1. keyed writes, 1 node, wrk -c64, $SECS s (pg_stat_statements + perf)"
start_nodes 1 t1
P -d t1 -c "SELECT pg_stat_statements_reset()" >/dev/null
wrk -t1 -c64 -d"${SECS}s" --timeout 10s -s bench/load.lua "${URLS[0]}" -- keyed nginx "$W/k1" $RANDOM >"$W/k1.wrk" 2>&1 &
wp=$!
sleep 1
perf_top "$W/perf-keyed.data"
wait $wp
grep 'Requests/sec' "$W/k1.wrk"
curl -s "${URLS[0]}/metrics" | grep -E '^tally_(db_transactions_total|db_round_trips_total|writer_batch_commands_(sum|count)) '
echo "  scans of each table during the load (pg_stat_user_tables: seq_scan, seq_tup_read, idx_scan, n_live_tup, last analyze):"
P -d t1 -F' | ' -c "SELECT relname, seq_scan, seq_tup_read, idx_scan, n_live_tup, coalesce(greatest(last_analyze, last_autoanalyze)::text, 'never')
    FROM pg_stat_user_tables WHERE relname LIKE 'tally%' ORDER BY seq_tup_read DESC" | sed 's/^/   /'
top=$(P -d t1 -c "SELECT max(seq) FROM tally_log")
echo "  the log scans as the writer's fold and trending send them (statistics as the load left them), log head $top:"
for lim in 1025 10000; do
    echo "   LIMIT $lim:"
    P -d t1 -c "EXPLAIN (ANALYZE, COSTS OFF, SUMMARY) SELECT seq, item, \"user\", from_kind, to_kind, version, at_ms FROM tally_log WHERE seq > $((top - 30)) ORDER BY seq LIMIT $lim" | sed 's/^/     /'
done
stop_nodes
echo "  per statement (per_commit = calls / COMMITs; plan/exec ms per call; WAL per call):"
statements t1 | sed 's/^/   /'
P -d t1 -F' ' -c "SELECT 'tables: rows', (SELECT count(*) FROM tally_rows), 'idem', (SELECT count(*) FROM tally_idem), 'log', (SELECT count(*) FROM tally_log),
  'n_tup_upd rows/idem', (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'tally_rows'), (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'tally_idem'),
  'n_tup_ins rows/idem', (SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'tally_rows'), (SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'tally_idem')" | sed 's/^/   /'

echo "== 1b. the peers' B_zipf.sql, pgbench -c16 -j2 -M prepared, $SECS s"
P -d bench -c "SELECT pg_stat_statements_reset()" >/dev/null
PGOPTIONS="-c synchronous_commit=on" pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c 16 -j 2 -T "$SECS" \
    -f "$PEERS/B_zipf.sql" bench >"$W/peer.pgb" 2>&1 &
pp=$!
sleep 1
perf_top "$W/perf-peer.data"
wait $pp
grep '^tps' "$W/peer.pgb"
P -d bench -F' | ' -c "SELECT calls, round((total_plan_time / calls)::numeric, 3), round((total_exec_time / calls)::numeric, 3),
    round(wal_records::numeric / calls, 1), round(wal_bytes::numeric / calls), regexp_replace(left(query, 60), '\s+', ' ', 'g')
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench') AND calls > 50 ORDER BY total_exec_time DESC LIMIT 3" | sed 's/^/   /'

echo "== 2. keyed writes, 2 nodes on one database (2 x wrk -c32), $SECS s: lock waits"
start_nodes 2 t2
WRK2=()
for i in 1 2; do
    wrk -t1 -c32 -d"${SECS}s" --timeout 10s -s bench/load.lua "${URLS[$((i - 1))]}" -- keyed nginx "$W/k2$i" $RANDOM$i >"$W/k2$i.wrk" 2>&1 &
    WRK2+=($!)
done
sleep 1
for _ in $(seq 1 $((SECS * 5))); do
    P -d t2 -c "SELECT 'waiting: ' || regexp_replace(left(w.query, 70), '\s+', ' ', 'g') || '  <-  blocked by: ' ||
                coalesce((SELECT regexp_replace(left(b.query, 50), '\s+', ' ', 'g') || ' [' || coalesce(b.wait_event, b.state) || ']'
                          FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(w.pid))[1]), '?')
                FROM pg_stat_activity w WHERE w.datname = 't2' AND w.wait_event_type = 'Lock'" >>"$W/locks" 2>/dev/null
    echo -- >>"$W/locks"
    sleep 0.1
done
wait "${WRK2[@]}"
grep 'Requests/sec' "$W"/k2?.wrk
echo "  lock waits seen in $(grep -c '^--$' "$W/locks") samples (count, waiting statement <- blocker [its state]):"
grep -v '^--$' "$W/locks" | sed -E 's/\$[0-9]+/$n/g' | sort | uniq -c | sort -rn | head -8 | sed 's/^/   /'
for u in "${URLS[@]}"; do curl -s "$u/metrics" | grep -E '^tally_(db_transactions_total|writer_conflict_retries_total|fold_leader) '; done
stop_nodes

echo "== 3. the feed page's statement on t1 (rows written in 1.), EXPLAIN ANALYZE"
ids=$(python3 -c "print('{' + ','.join('p%d' % ((r * 999983 + 12345) % 1000000) for r in range(1, 101)) + '}')")
q="SELECT 0, item, kind, n FROM tally_counts WHERE item = ANY('$ids'::text[]) UNION ALL SELECT 1, item, kind, version FROM tally_rows WHERE \"user\" = 'u12345' AND item = ANY('$ids'::text[])"
P -d t1 -c "VACUUM ANALYZE" >/dev/null
echo "  as tally sends it (literal ids, planned for every page), 3 runs:"
for _ in 1 2 3; do P -d t1 -c "EXPLAIN (ANALYZE, SUMMARY) $q" | grep -E 'Planning Time|Execution Time' | tr '\n' ' '; echo; done | sed 's/^/   /'
P -d t1 -c "EXPLAIN (ANALYZE, COSTS OFF) $q" | grep -vE 'Time' | head -12 | sed 's/^/   /'
echo "  prepared, ids and viewer as parameters (generic plan after 5 runs), runs 7 and 8:"
P -d t1 <<SQL | grep -E 'Planning Time|Execution Time' | tr '\n' ' ' | sed 's/^/   /'
PREPARE feed(text[], text) AS SELECT 0, item, kind, n FROM tally_counts WHERE item = ANY(\$1) UNION ALL SELECT 1, item, kind, version FROM tally_rows WHERE "user" = \$2 AND item = ANY(\$1);
EXECUTE feed('$ids', 'u1'); EXECUTE feed('$ids', 'u2'); EXECUTE feed('$ids', 'u3'); EXECUTE feed('$ids', 'u4'); EXECUTE feed('$ids', 'u5'); EXECUTE feed('$ids', 'u6');
EXPLAIN (ANALYZE, SUMMARY) EXECUTE feed('$ids', 'u7');
EXPLAIN (ANALYZE, SUMMARY) EXECUTE feed('$ids', 'u8');
SQL
echo
exit 0
}
