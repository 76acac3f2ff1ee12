#!/usr/bin/env bash
# bench/pg_bench.sh — tally on PostgreSQL beside the peers' own PostgreSQL transaction, in
# one run. Not part of the test suite; never run by CI; prints figures and never fails on them.
#
#   bench/pg_bench.sh [SECONDS] [ROUNDS]        (from the project root, after make; run as root)
#
# Sets up a throwaway PostgreSQL 15 cluster on 127.0.0.1:$PG_PORT (default 56432) with the peers'
# settings (the peers' pg_setup.sh: shared_buffers=2GB, max_wal_size=8GB, checkpoint_timeout=30min,
# fsync/full_page_writes/synchronous_commit on; plus track_wal_io_timing=on for pg_stat_wal's sync
# time), then, ROUNDS times (default 2; the order reversed in even rounds, so neither side always
# runs on the warmer machine):
#   peer-write   pgbench -n -M prepared -c 16 -j 2, the peers' B_zipf.sql (conditional write +
#                transition + idempotency record per transaction), synchronous_commit=on, on the
#                peers' schema, tables truncated + CHECKPOINT first (as run_pg.sh)
#   keyed-1/-2   tallyd on a fresh database, 1 node (wrk -c64) or 2 nodes on the same database
#                (two wrk -c32, one per node): PUTs with a fresh Idempotency-Key each (load.lua keyed)
#   write-1/-2   the same PUTs without a key (load.lua write)
#   viral-1/-2   every PUT on one item, distinct users (load.lua viral)
# then the feed: one database populated through tally (load.lua write for $POP_SECONDS), and ROUNDS times
#   peer-feed    pgbench -n -M prepared -c 16 -j 2 on tally's own tables: per transaction the two
#                statements a page needs (counts of 100 items; the viewer's rows among them), on
#                100 pages of 100 distinct Zipf ids drawn like load.lua's, a uniform viewer
#   feed-1/-2    GET /v1/items?ids=<100 ids> with a viewer (load.lua feed), 1 node (wrk -c32) or 2 (2 × -c16)
# and last the latency at a set rate: paced-1 (keyed PUTs paced at half the best keyed-1 rate,
# wrk -c64) and paced-w-1 (no key, half the best write-1 rate), on a fresh database.
#
# Every figure is one line: rate, wrk's p50/p99/p99.9 (ms), and what bounds it: tallyd's /metrics
# over the run (commits, commands per commit, round trips per commit, mean COMMIT ms, conflict
# retries), CPU in % of one core (tallyd, its writer thread, PostgreSQL, the whole machine of 200 %),
# pg_stat_wal (syncs/s, ms per sync, WAL bytes per request) and the wait events of the database's
# active sessions sampled every 0.2 s (pg_stat_activity; Lock waits name the relation from
# pg_locks). Ratios last. The machine is shared: compare figures of the same run only.
#
# Bounded: every load has a fixed duration, every wait loop a count. Environment: PG_PORT, TALLYD,
# POP_SECONDS (default 3 × SECONDS), BENCH_KEEP=1 (keep the temporary directory), PEERS (required: the
# folder of the reference peers' scripts, pg_schema.sql and B_zipf.sql; they are not in this tree).
set -u
{ # parsed whole before it runs: editing this file during a run changes nothing
cd "$(dirname "$0")/.."
SECS=${1:-10}
ROUNDS=${2:-2}
POP=${POP_SECONDS:-$((3 * SECS))}
PORT=${PG_PORT:-56432}
PEERS=$(cd "${PEERS:?set PEERS to the folder of the peer scripts}" && pwd) || { echo "pg_bench: no peers' scripts" >&2; exit 2; }
TALLYD=${TALLYD:-build/tallyd}
PGBIN=/usr/lib/postgresql/15/bin
[ -x "$TALLYD" ] || { echo "pg_bench: $TALLYD not built (make)" >&2; exit 2; }
for c in wrk pgbench psql curl python3; do command -v $c >/dev/null || { echo "pg_bench: needs $c" >&2; exit 2; }; done
W=$(mktemp -d /tmp/tally-pgbench.XXXXXX)
chmod 755 "$W"
cp "$TALLYD" "$W/bench-tallyd" # a name of its own: a pkill of "tallyd" elsewhere does not end a run
NODE_PIDS=() SAMPLER_PID="" PGB_PID=""
log() { printf '[pg_bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

cleanup() {
    set +e
    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
    [ -n "$PGB_PID" ] && kill "$PGB_PID" 2>/dev/null
    for p in "${NODE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    [ -f "$W/pg/data/postmaster.pid" ] && runuser -u postgres -- $PGBIN/pg_ctl -D "$W/pg/data" -m fast -w -t 60 stop >/dev/null 2>&1
    if [ "${BENCH_KEEP:-0}" = 1 ]; then log "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

P() { psql -h 127.0.0.1 -p "$PORT" -U postgres -qtAX "$@"; }

# ---------------------------------------------------------------- the cluster (the peers' settings)
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
# fsync, full_page_writes, wal_sync_method, commit_delay, synchronous_commit: defaults (on, on, fdatasync, 0, on)
track_wal_io_timing = on
CONF
runuser -u postgres -- $PGBIN/pg_ctl -D "$W/pg/data" -l "$W/pg/server.log" -w -t 60 start >/dev/null || exit 1
PM_PID=$(head -1 "$W/pg/data/postmaster.pid")
P -c "CREATE DATABASE bench" >/dev/null
P -d bench -v ON_ERROR_STOP=1 -f "$PEERS/pg_schema.sql" >/dev/null || exit 1
P -d bench -c "ALTER TABLE reactions DISABLE TRIGGER reactions_counts" >/dev/null
PGV=$(P -c "SHOW server_version")
log "PostgreSQL $PGV on 127.0.0.1:$PORT (postmaster $PM_PID), data in $W/pg; $SECS s per figure, $ROUNDS rounds"

# ---------------------------------------------------------------- measurement helpers
CLK=$(getconf CLK_TCK)
machine_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
pid_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# all of PostgreSQL: the postmaster, its exited children (cutime/cstime) and the living ones
pg_ticks() {
    local t c
    t=$(awk '{print $14+$15+$16+$17}' "/proc/$PM_PID/stat")
    for c in $(cat /proc/$PM_PID/task/$PM_PID/children 2>/dev/null); do t=$((t + $(pid_ticks "$c"))); done
    echo "$t"
}
# the writer threads' ticks of the given tallyd processes (thread names from prctl: "writer" in the name)
writer_ticks() {
    local t=0 p f
    for p in "$@"; do
        for f in /proc/$p/task/*; do
            grep -q writer "$f/comm" 2>/dev/null && t=$((t + $(awk '{print $14+$15}' "$f/stat")))
        done
    done
    echo "$t"
}
metric() { # FILE NAME: the sum of a metric's samples over the nodes' /metrics files
    awk -v n="$2" '$1 == n {s += $2} END {printf "%.6f", s + 0}' "$1"
}
metrics_all() { # OUT URL...: every node's /metrics, concatenated
    local out=$1
    shift
    : >"$out"
    for u in "$@"; do curl -s -m 5 "$u/metrics" >>"$out"; done
}
wal_snap() { P -F' ' -c "SELECT wal_records, wal_bytes, wal_sync, wal_sync_time, wal_write FROM pg_stat_wal"; }
sampler() { # DB OUT: wait events of the database's active sessions, every 0.2 s, bounded
    local db=$1 out=$2 i
    for i in $(seq 1 $((SECS * 5 + 10))); do
        P -d "$db" -c "SELECT coalesce(wait_event_type || ':' || wait_event, 'on-CPU') ||
              coalesce((SELECT ' ' || coalesce(l.relation::regclass::text, l.locktype) FROM pg_locks l
                        WHERE l.pid = a.pid AND NOT l.granted LIMIT 1), '')
              FROM pg_stat_activity a WHERE a.datname = current_database() AND a.state = 'active'
              AND a.pid <> pg_backend_pid()" >>"$out" 2>/dev/null
        echo "--" >>"$out"
        sleep 0.2
    done
}
waits_summary() { # OUT: sessions active on average, and the five commonest states as % of session samples
    local f=$1 total n
    n=$(grep -c '^--$' "$f") total=$(grep -vc '^--$' "$f")
    awk -v a="$total" -v b="$n" 'BEGIN {printf "active sessions %.1f", (b ? a / b : 0)}'
    grep -v '^--$' "$f" | sort | uniq -c | sort -rn | head -5 |
        awk -v t="$total" '{c = $1; $1 = ""; printf " | %s %.0f%%", substr($0, 2), 100 * c / t}'
}

# measure NAME DB KIND URLS... — runs the load (KIND: wrk SCENARIO CONNS_PER_NODE [RATE], or pgbench
# SCRIPT_ARGS) while sampling; prints one FIG line and appends it to $W/figures.
BEGIN_STATE() {
    M0=$(machine_ticks) PG0=$(pg_ticks) T0=$(date +%s.%N)
    TL0=0
    for p in "${NODE_PIDS[@]}"; do TL0=$((TL0 + $(pid_ticks "$p"))); done
    WR0=$(writer_ticks "${NODE_PIDS[@]}")
    P -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
    : >"$W/waits"
    sampler "$1" "$W/waits" &
    SAMPLER_PID=$!
}
END_STATE() {
    kill "$SAMPLER_PID" 2>/dev/null
    wait "$SAMPLER_PID" 2>/dev/null
    SAMPLER_PID=""
    local t1 m1 pg1 tl1=0 wr1 el p
    t1=$(date +%s.%N) m1=$(machine_ticks) pg1=$(pg_ticks)
    for p in "${NODE_PIDS[@]}"; do tl1=$((tl1 + $(pid_ticks "$p"))); done
    wr1=$(writer_ticks "${NODE_PIDS[@]}")
    el=$(awk -v a="$T0" -v b="$t1" 'BEGIN {print b - a}')
    CPU=$(awk -v el="$el" -v k="$CLK" -v m=$((m1 - M0)) -v g=$((pg1 - PG0)) -v t=$((tl1 - TL0)) -v w=$((wr1 - WR0)) \
        'BEGIN {printf "cpu%%: tallyd %.0f (writer %.0f) postgres %.0f client+rest %.0f machine %.0f", 100*t/k/el, 100*w/k/el, 100*g/k/el, 100*(m-t-g)/k/el, 100*m/k/el}')
    WAL=$(wal_snap)
    WAITS=$(waits_summary "$W/waits")
}
wal_line() { # REQUESTS: syncs/s, ms per sync, WAL bytes per request
    echo "$WAL" | awk -v s="$SECS" -v n="$1" '{printf "wal: %.0f syncs/s %.2f ms/sync %.0f B/req %.2f records/req", $3/s, ($3 ? $4/$3 : 0), (n ? $2/n : 0), (n ? $1/n : 0)}'
}

FIGS=$W/figures
: >"$FIGS"
fig() { # NAME RATE REST...
    local name=$1 rate=$2
    shift 2
    printf '%-10s %8.0f/s  %s\n' "$name" "$rate" "$*" | tee -a "$FIGS"
}

start_nodes() { # N DB
    local n=$1 db=$2 i port
    NODE_PIDS=() NODE_URLS=()
    for i in $(seq 1 "$n"); do
        "$W/bench-tallyd" --listen 127.0.0.1:0 --store "postgresql://postgres@127.0.0.1:$PORT/$db" \
            --rate-limit off --read-rate-limit off >"$W/node$i.out" 2>"$W/node$i.err" &
        NODE_PIDS+=($!)
        port=""
        for _ in $(seq 1 200); do
            port=$(grep -o 'http://127.0.0.1:[0-9]*' "$W/node$i.out" 2>/dev/null | head -1 | sed 's/.*://')
            [ -n "$port" ] && break
            kill -0 "${NODE_PIDS[-1]}" 2>/dev/null || break
            sleep 0.05
        done
        [ -n "$port" ] || { cat "$W/node$i.err" >&2; log "node $i did not start"; exit 1; }
        for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break; sleep 0.05; done
        NODE_URLS+=("http://127.0.0.1:$port")
    done
}
stop_nodes() {
    local p
    for p in "${NODE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    NODE_PIDS=()
}
fresh_db() { # DB
    P -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
}

# run_tally NAME DB NODES SCENARIO CONNS_TOTAL [RATE] — nodes already started on DB
run_tally() {
    local name=$1 db=$2 nodes=$3 scen=$4 conns=$5 rate=${6:-} i per pids=() seed
    per=$((conns / nodes))
    P -d "$db" -c CHECKPOINT >/dev/null
    metrics_all "$W/m0" "${NODE_URLS[@]}"
    BEGIN_STATE "$db"
    for i in $(seq 1 "$nodes"); do
        seed=$RANDOM$i
        # paced: RATE is the total; each node's wrk gets its share
        wrk -t1 -c"$per" -d"${SECS}s" --latency --timeout 10s -s bench/load.lua "${NODE_URLS[$((i - 1))]}" -- \
            "$scen" tally "$W/r$i" "$seed" ${rate:+$(awk -v r="$rate" -v n="$nodes" 'BEGIN {printf "%.0f", r / n}')} >"$W/r$i.wrk" 2>&1 &
        pids+=($!)
    done
    if [ "$nodes" = 1 ]; then (sleep $((SECS / 2)); top -b -H -n 1 -p "${NODE_PIDS[0]}" >"$W/$name.top" 2>/dev/null) & fi
    for p in "${pids[@]}"; do wait "$p"; done
    END_STATE
    metrics_all "$W/m1" "${NODE_URLS[@]}"
    local rps=0 reqs=0 lat="" non=0 f
    for i in $(seq 1 "$nodes"); do
        f=$W/r$i.result
        [ -s "$f" ] || { log "$name: wrk gave no result"; cat "$W/r$i.wrk" >&2; continue; }
        eval "$(tr ' ' '\n' <"$f" | grep -E '^(rps|requests|p50_us|p99_us|p999_us|non2xx|sock_errors)=' | sed 's/^/R_/')"
        rps=$(awk -v a="$rps" -v b="$R_rps" 'BEGIN {print a + b}')
        reqs=$((reqs + R_requests))
        non=$((non + R_non2xx + R_sock_errors))
        lat="$lat$(awk -v a="$R_p50_us" -v b="$R_p99_us" -v c="$R_p999_us" 'BEGIN {printf "%.2f/%.2f/%.2f ", a/1000, b/1000, c/1000}')"
    done
    d() { awk -v a="$(metric "$W/m0" "$1")" -v b="$(metric "$W/m1" "$1")" 'BEGIN {print b - a}'; }
    local commits rts cmds cmdn csum ccnt retr
    commits=$(d tally_writer_commits_total) rts=$(d tally_db_round_trips_total)
    cmds=$(d tally_writer_batch_commands_sum) cmdn=$(d tally_writer_batch_commands_count)
    csum=$(d tally_db_commit_seconds_sum) ccnt=$(d tally_db_commit_seconds_count) retr=$(d tally_writer_conflict_retries_total)
    local db_line
    db_line=$(awk -v c="$commits" -v r="$rts" -v s="$cmds" -v n="$cmdn" -v cs="$csum" -v cc="$ccnt" -v x="$retr" -v t="$SECS" -v q="$reqs" \
        'BEGIN {printf "db: %.0f commits/s %.1f cmds/commit %.2f round-trips/req %.1f round-trips/commit (all, reads incl.) COMMIT %.2f ms mean, %d conflict retries", c/t, (n ? s/n : 0), (q ? r/q : 0), (c ? r/c : 0), (cc ? 1000*cs/cc : 0), x}')
    echo "$rps" >"$W/$name.rps"
    fig "$name" "$rps" "p50/p99/p99.9 ms ${lat}| non2xx+errors $non | $db_line | $CPU | $(wal_line "$reqs") | waits: $WAITS"
}

# run_pgbench NAME DB ARGS... — pgbench -n -M prepared -c 16 -j 2, synchronous_commit on
run_pgbench() {
    local name=$1 db=$2
    shift 2
    P -d "$db" -c CHECKPOINT >/dev/null
    NODE_PIDS=()
    BEGIN_STATE "$db"
    PGOPTIONS="-c synchronous_commit=on" timeout $((SECS + 60)) pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared \
        -c 16 -j 2 -T "$SECS" "$@" "$db" >"$W/$name.pgb" 2>&1
    END_STATE
    local tps lat nx fails
    tps=$(awk '/^tps = /{print $3}' "$W/$name.pgb")
    lat=$(awk '/^latency average/{print $4}' "$W/$name.pgb")
    nx=$(awk '/number of transactions actually processed/{print $NF; exit}' "$W/$name.pgb")
    fails=$(awk '/number of failed transactions/{print $5; exit}' "$W/$name.pgb")
    [ -n "$tps" ] || { log "$name: pgbench gave no tps"; tail -5 "$W/$name.pgb" >&2; tps=0; }
    echo "$tps" >"$W/$name.rps"
    fig "$name" "$tps" "latency avg ${lat:-?} ms | tx ${nx:-0} failed ${fails:-0} | $CPU | $(wal_line "${nx:-0}") | waits: $WAITS"
}

peer_write() {
    P -d bench -c "TRUNCATE reactions, transitions, idempotency, counts RESTART IDENTITY" -c "UPDATE agg_checkpoint SET seq=0" >/dev/null
    run_pgbench peer-write bench -f "$PEERS/B_zipf.sql"
}
tally_write() { # SCENARIO NODES
    local name=$1-$2
    fresh_db tw
    start_nodes "$2" tw
    run_tally "$name" tw "$2" "$1" 64
    stop_nodes
}

# ---------------------------------------------------------------- writes
for r in $(seq 1 "$ROUNDS"); do
    order="peer keyed:1 keyed:2 write:1 write:2 viral:1 viral:2"
    [ $((r % 2)) = 0 ] && order="viral:2 viral:1 write:2 write:1 keyed:2 keyed:1 peer"
    log "writes, round $r: $order"
    for x in $order; do
        if [ "$x" = peer ]; then peer_write; n=peer-write; else tally_write "${x%:*}" "${x#*:}"; n=${x%:*}-${x#*:}; fi
        cp "$W/$n.rps" "$W/$n.rps.$r" 2>/dev/null
    done
done

# ---------------------------------------------------------------- feed
fresh_db tf
start_nodes 1 tf
log "populating the feed's database through tally: load.lua write for $POP s"
wrk -t1 -c64 -d"${POP}s" --timeout 10s -s bench/load.lua "${NODE_URLS[0]}" -- write nginx "$W/pop" "$RANDOM" >"$W/pop.wrk" 2>&1
stop_nodes
P -d tf -c "VACUUM ANALYZE" >/dev/null
FEED_DATA=$(P -d tf -F' ' -c "SELECT (SELECT count(*) FROM tally_rows), (SELECT count(DISTINCT item) FROM tally_counts), pg_size_pretty(pg_database_size('tf'))")
log "feed data: rows items size = $FEED_DATA"
mkdir -p "$W/feed"
python3 - "$W/feed" <<'PY'
import bisect, random, sys
# load.lua's distribution: Zipf(1.1) ranks over 1M, rank -> id (rank * 999983 + 12345) mod 1M, ids "p<id>"
N, S = 1000000, 1.1
cdf, acc = [], 0.0
for k in range(1, N + 1):
    acc += k ** -S
    cdf.append(acc)
rnd = random.Random(13)
for p in range(100):
    seen = []
    while len(seen) < 100:
        rank = bisect.bisect_left(cdf, rnd.random() * acc) + 1
        i = "p%d" % ((rank * 999983 + 12345) % N)
        if i not in seen:
            seen.append(i)
    ids = "'{" + ",".join(seen) + "}'::text[]"
    with open("%s/page%03d.sql" % (sys.argv[1], p), "w") as f:
        f.write("\\set u random(0, 999999)\n")
        f.write("SELECT item, kind, n FROM tally_counts WHERE item = ANY(%s);\n" % ids)
        f.write("SELECT item, kind, version FROM tally_rows WHERE \"user\" = 'u' || :u AND item = ANY(%s);\n" % ids)
PY
FEED_ARGS=()
for f in "$W"/feed/page*.sql; do FEED_ARGS+=(-f "$f"); done
for r in $(seq 1 "$ROUNDS"); do
    order="peer 1 2"
    [ $((r % 2)) = 0 ] && order="2 1 peer"
    log "feed, round $r: $order"
    for x in $order; do
        if [ "$x" = peer ]; then
            run_pgbench peer-feed tf "${FEED_ARGS[@]}"
            cp "$W/peer-feed.rps" "$W/peer-feed.rps.$r"
        else
            start_nodes "$x" tf
            run_tally "feed-$x" tf "$x" feed 32
            stop_nodes
            cp "$W/feed-$x.rps" "$W/feed-$x.rps.$r"
        fi
    done
done

# ---------------------------------------------------------------- latency at half the best rate
best() { cat "$W/$1".rps.* | sort -g | tail -1; }
for s in keyed write; do
    half=$(awk -v b="$(best $s-1)" 'BEGIN {printf "%.0f", b / 2}')
    fresh_db tp
    start_nodes 1 tp
    log "paced $s: $half/s (half the best $s-1)"
    run_tally "paced-$([ $s = keyed ] && echo k || echo w)-1" tp 1 "paced$([ $s = keyed ] && echo _keyed)" 64 "$half"
    stop_nodes
done

# ---------------------------------------------------------------- ratios
echo
echo "pg_bench: $(date -u +%FT%TZ), PostgreSQL $PGV, $SECS s per figure, $ROUNDS rounds, tallyd $(git rev-parse --short HEAD 2>/dev/null), feed data: $FEED_DATA (rows items size)"
ratio() { # LABEL A B TARGET: per round A/B, then min..max
    local label=$1 a=$2 b=$3 tgt=$4 out="" r x y
    for r in $(seq 1 "$ROUNDS"); do
        x=$(cat "$W/$a.rps.$r" 2>/dev/null || echo 0) y=$(cat "$W/$b.rps.$r" 2>/dev/null || echo 0)
        out="$out $(awk -v x="$x" -v y="$y" 'BEGIN {printf "%.2f", (y > 0 ? x / y : 0)}')"
    done
    printf 'ratio %-24s per round:%s  (target %s)\n' "$label" "$out" "$tgt"
}
ratio "keyed-1 / peer-write" keyed-1 peer-write ">= 2"
ratio "keyed-2 / peer-write" keyed-2 peer-write ">= 2"
ratio "viral-1 / write-1" viral-1 write-1 ">= 0.95"
ratio "viral-2 / write-2" viral-2 write-2 ">= 0.95"
ratio "feed-1 / peer-feed" feed-1 peer-feed ">= 0.8"
ratio "feed-2 / peer-feed" feed-2 peer-feed ">= 0.8"
ratio "keyed-2 / keyed-1" keyed-2 keyed-1 "(two nodes)"
ratio "write-2 / write-1" write-2 write-1 "(two nodes)"
grep '^paced' "$FIGS" | sed 's/^/p99 target <= 20 ms: /'
exit 0
}
