#!/bin/bash
# bench/pg_shards.sh — one node over one database against one node over two shards (two PostgreSQL
# instances), Zipf items and one viral item, keyed durable writes, and the peers' pgbench transaction,
# alternating on throwaway clusters. Not part of the test suite; prints figures, never fails on them.
#
#   PEERS=DIR bench/pg_shards.sh [TALLYD] [SECONDS] [ROUNDS]      (from the project root, as root)
#
# Two clusters, pg_nodes.sh's settings (fsync, synchronous_commit on, shared_buffers 2GB,
# pg_stat_statements, track_wal_io_timing): A on 127.0.0.1:$PG_PORT (56467), B on $PG_PORT + 1. Two
# instances rather than two databases of one: a shard is a primary of its own, with its own WAL, its
# own flushes and its own walwriter, and only so are a shard's WAL bytes (pg_current_wal_lsn is an
# instance's) and its PostgreSQL CPU its own. Per round, the order rotated by one each round:
#   keyed-1        one tallyd, --store A (the reference), wrk -t1 -c64 load.lua keyed (Zipf items)
#   keyed-2shards  one tallyd, --store A --store B, the same load
#   viral-1        one tallyd, --store A, load.lua viral_keyed (every write to viral-1, each keyed)
#   viral-2shards  one tallyd, --store A --store B, the same (viral-1 is on shard 1 of 2)
#   write-1, write-2shards  as keyed-1 and keyed-2shards without Idempotency-Key (load.lua write): no
#                  claims, so what the shards cost apart from the claim
#   peer           the peers' B_zipf.sql on A, pgbench -M prepared -c16 -j2 (as pg_nodes.sh)
# Every tally figure on fresh databases. Per figure:
#   - rate, latency; load average before it; CPU of tallyd, of each instance, of wrk, of the machine
#     (% of a core and µs a write); schedstat of the writer threads and of each shard's writer backend
#   - the split: keyed writes stored per shard (tally_idem rows: one a keyed write, on the item's
#     shard), claims per shard (tally_claims rows, on the user's shard), log entries and list entries
#     per shard; for Zipf, the split predicted from what wrk sent (load.lua's .pairs, CRC-32 and the
#     map read from the database) and the share of the hottest items
#   - per shard: WAL bytes a write (of all writes, and of the shard's own), statements a write
#     (pg_stat_statements, every session), the writer session's round trips (sendto of its backend,
#     perf stat; for shard 0 also tallyd's own count, tally_db_writer_round_trips_total, of shard 0
#     only) a write and a batch, the writer's batches (its idempotency look-up, one a batch of
#     writes, and its claims' lock, one a batch of claims; shard 0's writer commits from /metrics)
#   - what the claims cost: their statements' calls and execution µs a write, on each shard
#   - sessions of each shard's database sampled every 100 ms (pg_stat_activity): wait event or on-CPU;
#     for a Lock wait, the blocker's session, its wait event and statement
# Before the rounds, the CPU of an idle node with one and with two shards (the followers' polls).
# Last, the figures side by side and the ratios of each round and pooled. FIGURES="…": only those,
# in that order, every round (no ratios). NODE_ARGS: more tallyd flags. CONNS: wrk connections (64).
set -u
cd "$(dirname "$0")/.."
PEERS=$(cd "${PEERS:?set PEERS to the folder of the peer scripts (pg_schema.sql, B_zipf.sql)}" && pwd) || exit 2
BIN=${1:-build/tallyd} SECS=${2:-8} ROUNDS=${3:-3}
PORT=${PG_PORT:-56467} PGB=/usr/lib/postgresql/15/bin
PY=/usr/bin/python3
T=$(mktemp -d /tmp/tally-shards.XXXX); chmod 755 $T; mkdir -p $T/pg; chown postgres:postgres $T/pg
cp "$BIN" $T/tallyd
PIDS=() PERFS=()
cleanup() {
  for p in "${PIDS[@]}" "${PERFS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  for i in 0 1; do runuser -u postgres -- $PGB/pg_ctl -D $T/pg/d$i -m fast -w stop >/dev/null 2>&1; done
  [ "${BENCH_KEEP:-0}" = 1 ] && echo "kept $T" >&2 || rm -rf $T
}
trap cleanup EXIT
for i in 0 1; do
  runuser -u postgres -- $PGB/initdb -D $T/pg/d$i -A trust -E UTF8 --no-locale >/dev/null || exit 1
  cat >>$T/pg/d$i/postgresql.conf <<CONF
port = $((PORT + i))
listen_addresses = '127.0.0.1'
unix_socket_directories = '$T/pg'
max_connections = 100
shared_buffers = 2GB
max_wal_size = 8GB
checkpoint_timeout = 30min
track_wal_io_timing = on
shared_preload_libraries = 'pg_stat_statements'
CONF
  runuser -u postgres -- $PGB/pg_ctl -D $T/pg/d$i -l $T/pg/log$i -w start >/dev/null || exit 1
done
P() { local i=$1; shift; psql -h 127.0.0.1 -p $((PORT + i)) -U postgres -qtAX "$@"; }  # P INSTANCE ARGS
P 0 -c "CREATE DATABASE bench" >/dev/null; P 0 -d bench -f $PEERS/pg_schema.sql >/dev/null
P 0 -d bench -c "ALTER TABLE reactions DISABLE TRIGGER reactions_counts" -c "CREATE EXTENSION pg_stat_statements" >/dev/null

CLK=$(getconf CLK_TCK)
machine_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
pid_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() { # INSTANCE: its postmaster, the postmaster's exited children and the living ones
  local pm t c; pm=$(head -1 $T/pg/d$1/postmaster.pid)
  t=$(awk '{print $14+$15+$16+$17}' /proc/$pm/stat)
  for c in $(cat /proc/$pm/task/$pm/children 2>/dev/null); do t=$((t + $(pid_ticks $c))); done
  echo $t
}
tallyd_ticks() { local t=0 p; for p in "${PIDS[@]}"; do t=$((t + $(pid_ticks $p))); done; echo $t; }
sched() { local r=0 w=0 a b x; for x in "$@"; do read -r a b _ <"$x" 2>/dev/null || continue; r=$((r + a)); w=$((w + b)); done; echo $r $w; }
writer_tasks() { local p t; for p in "${PIDS[@]}"; do for t in /proc/$p/task/*; do
  [ "$(cat $t/comm 2>/dev/null)" = tally-writer ] && echo $t/schedstat; done; done; }
writer_backend() { P $1 -d $2 -c "SELECT pid FROM pg_stat_activity WHERE datname = '$2' AND application_name = 'tallyd writer'" | head -1; }
m() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
wal() { P $1 -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_sync, wal_sync_time FROM pg_stat_wal" | tr '|' ' '; }
start() { # NSHARDS: one tallyd over fresh databases t on instances 0..N-1; its URL in U
  local i stores=""
  for i in $(seq 0 $(($1 - 1))); do
    P $i -c "DROP DATABASE IF EXISTS t" -c "CREATE DATABASE t" >/dev/null 2>&1
    P $i -d t -c "CREATE EXTENSION pg_stat_statements" >/dev/null
    stores="$stores --store postgresql://postgres@127.0.0.1:$((PORT + i))/t"
  done
  $T/tallyd --listen 127.0.0.1:0 $stores --rate-limit off --read-rate-limit off ${NODE_ARGS:-} >$T/out 2>$T/err &
  PIDS=($!) U=""
  for _ in $(seq 100); do U=$(grep -o 'http://127.0.0.1:[0-9]*' $T/out 2>/dev/null | head -1); [ -n "$U" ] && break; sleep 0.1; done
  for _ in $(seq 50); do curl -sf -o /dev/null $U/readyz && break; sleep 0.1; done
  [ -n "$U" ] || echo "   VOID: tallyd did not start: $(tail -2 $T/err)"
  for i in $(seq 0 $(($1 - 1))); do P $i -d t -c CHECKPOINT >/dev/null; done
}
stop() { for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p"; done; PIDS=(); }
sampler() { # INSTANCE: database t's sessions every 100 ms for SECS - 2 s, into $T/samp$1 (app | event | n)
  P $1 -d t >$T/samp$1 2>/dev/null <<SQL
CREATE TEMP TABLE s (app text, ev text);
DO \$\$ BEGIN FOR i IN 1..$(((SECS - 2) * 10)) LOOP PERFORM pg_stat_clear_snapshot();
  INSERT INTO s SELECT CASE WHEN application_name LIKE 'tallyd%' THEN application_name ELSE 'client' END,
    CASE WHEN a.state <> 'active' THEN a.state WHEN a.wait_event_type = 'Lock' THEN 'Lock:' || a.wait_event || ' <- ' ||
      coalesce((SELECT b.application_name || ' ' || coalesce(b.wait_event_type || ':' || b.wait_event, b.state || ' on-CPU') || ' ' ||
        CASE WHEN b.query LIKE 'WITH h AS (UPDATE tally_log_head SET seq = seq +%' THEN 'list-from-other-shards'
          WHEN b.query LIKE 'WITH h AS (UPDATE tally_log_head%' THEN 'log-head' WHEN b.query ILIKE 'commit%' THEN 'COMMIT'
          ELSE left(b.query, 16) END
        FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(a.pid))[1]), '?')
      ELSE coalesce(a.wait_event_type || ':' || a.wait_event, 'on-CPU') END
    FROM pg_stat_activity a WHERE a.datname = 't' AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend';
  PERFORM pg_sleep(0.1); END LOOP; END \$\$;
SELECT app, ev, count(*) FROM s GROUP BY 1, 2 ORDER BY 1, 3 DESC;
SQL
}
# per database t, after a figure (pg_stat_statements reset before it), one line:
# all calls | claims' calls | claims' exec ms | the writer's idempotency look-ups (one a batch of keyed
# writes) | claims' lock (one a batch of claims) | the user-list fold's statements from other shards'
# logs: calls, exec ms | log head (the writer's) calls | COMMIT calls | all exec ms |
# idem rows | log rows | claim rows | list rows
STATS="SELECT coalesce(sum(calls), 0),
  coalesce(sum(calls) FILTER (WHERE query LIKE '%tally_claims%' AND query NOT LIKE 'WITH d AS (DELETE%'), 0),
  round(coalesce(sum(total_exec_time) FILTER (WHERE query LIKE '%tally_claims%' AND query NOT LIKE 'WITH d AS (DELETE%'), 0)::numeric, 3),
  coalesce(sum(calls) FILTER (WHERE query LIKE 'SELECT \"user\", key, expires_ms, fingerprint, status%'), 0),
  coalesce(sum(calls) FILTER (WHERE query LIKE 'SELECT \"user\", key, expires_ms, fingerprint FROM tally_claims%'), 0),
  coalesce(sum(calls) FILTER (WHERE query LIKE 'WITH h AS (UPDATE tally_log_head SET seq = seq +%INSERT INTO tally_lists%'), 0),
  round(coalesce(sum(total_exec_time) FILTER (WHERE query LIKE 'WITH h AS (UPDATE tally_log_head SET seq = seq +%INSERT INTO tally_lists%'), 0)::numeric, 3),
  coalesce(sum(calls) FILTER (WHERE query LIKE 'WITH h AS (UPDATE tally_log_head SET seq = greatest%'), 0),
  coalesce(sum(calls) FILTER (WHERE query ILIKE 'commit%'), 0),
  round(coalesce(sum(total_exec_time), 0)::numeric, 3),
  (SELECT count(*) FROM tally_idem), (SELECT count(*) FROM tally_log), (SELECT count(*) FROM tally_claims), (SELECT count(*) FROM tally_lists)
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
# Zipf: the split that what wrk sent predicts (CRC-32 of the id mod 4096, the map of shard 0's
# identity), and the hottest items' shares
predicted() { # PAIRS MAPJSON
  $PY - "$1" "$2" <<'PY'
import collections, json, sys, zlib
ranges = json.loads(sys.argv[2])["map"]
def shard(item):
    v = zlib.crc32(item.encode()) % 4096
    return next(s for a, b, s in ranges if a <= v <= b)
writes = collections.Counter(line.split()[0] for line in open(sys.argv[1]) if line.strip())
n = sum(writes.values()); per = collections.Counter()
for item, c in writes.items(): per[shard(item)] += c
ids = collections.Counter(shard(i) for i in writes)
hot = " ".join("%s(s%d) %.1f%%" % (i, shard(i), 100 * c / n) for i, c in writes.most_common(5))
print("   predicted from what wrk sent: shard 0 %.1f%% shard 1 %.1f%% of %d writes (distinct items %.1f%% / %.1f%% of %d); hottest: %s"
      % (100 * per[0] / n, 100 * per[1] / n, n, 100 * ids[0] / len(writes), 100 * ids[1] / len(writes), len(writes), hot))
PY
}
figure() { # NAME
  local n=0 scen=keyed
  case $1 in keyed-1) n=1 ;; keyed-2shards) n=2 ;; viral-1) n=1 scen=viral_keyed ;; viral-2shards) n=2 scen=viral_keyed ;;
    write-1) n=1 scen=write ;; write-2shards) n=2 scen=write ;; esac
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local i k insts; insts=$(seq 0 $(($n > 0 ? $n - 1 : 0)))
  if [ $n = 0 ]; then
    P 0 -d bench -c "TRUNCATE reactions, transitions, idempotency, counts RESTART IDENTITY" -c "UPDATE agg_checkpoint SET seq=0" -c CHECKPOINT >/dev/null
    P 0 -d bench -c "SELECT pg_stat_statements_reset()" >/dev/null
  else
    start $n
    for i in $insts; do P $i -d t -c "SELECT pg_stat_statements_reset()" >/dev/null; done
  fi
  local w0=() w1=() pt0=() pt1=() wb=() bt0=() bt1=() c0="" c1="" rt0=0 rt1=0
  for i in 0 1; do w0[$i]=$(wal $i); pt0[$i]=$(pg_ticks $i); done
  PERFS=()
  if [ $n != 0 ]; then
    c0=$(m $U tally_writer_commits_total) rt0=$(m $U tally_db_writer_round_trips_total)
    for i in $insts; do
      wb[$i]=$(writer_backend $i t); bt0[$i]=$(sched /proc/${wb[$i]}/schedstat)
      perf stat -x, -e syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom -p ${wb[$i]} -o $T/ps$i -- sleep $SECS >/dev/null 2>&1 &
      PERFS+=($!)
    done
  fi
  local wt0 mt0 tt0 t0 gen=0
  wt0=$(sched $(writer_tasks)) mt0=$(machine_ticks) tt0=$(tallyd_ticks) t0=$(date +%s.%N)
  rm -f $T/r*.result $T/r*.pairs
  if [ $n = 0 ]; then
    PGOPTIONS='-c synchronous_commit=on' /usr/bin/time -f '%U %S' -o $T/gen pgbench -h 127.0.0.1 -p $PORT -U postgres -n -M prepared \
      -c 16 -j 2 -T $SECS -f $PEERS/B_zipf.sql bench >$T/pgb 2>&1 &
  else
    /usr/bin/time -f '%U %S' -o $T/gen wrk -t1 -c${CONNS:-64} -d${SECS}s --latency --timeout 10s -s bench/load.lua $U -- \
      $scen tally $T/r $RANDOM >/dev/null 2>&1 &
  fi
  local wk=$! sp=()
  if [ $n != 0 ]; then sleep 0.5; for i in $insts; do sampler $i & sp+=($!); done; fi
  sleep $((SECS - 1))
  local wt1; wt1=$(sched $(writer_tasks))
  if [ $n != 0 ]; then for i in $insts; do bt1[$i]=$(sched /proc/${wb[$i]}/schedstat); done; fi
  local el1; el1=$(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{print b - a}')
  wait $wk
  for p in "${sp[@]}" "${PERFS[@]}"; do wait $p; done; PERFS=()
  local el; el=$(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{print b - a}')
  local mt1 tt1; mt1=$(machine_ticks) tt1=$(tallyd_ticks)
  for i in 0 1; do w1[$i]=$(wal $i); pt1[$i]=$(pg_ticks $i); done
  [ "$(wc -l <$T/gen)" = 1 ] || echo "   VOID: load generator: $(head -1 $T/gen)"
  gen=$(tail -1 $T/gen | awk '{print $1 + $2}')
  local rate=0 lat="" st=()
  if [ $n = 0 ]; then
    rate=$(awk '/^tps = /{print $3}' $T/pgb); lat="avg $(awk '/^latency average/{print $4}' $T/pgb) ms"
  else
    c1=$(m $U tally_writer_commits_total) rt1=$(m $U tally_db_writer_round_trips_total)
    R_rps=0 R_p50_us=0 R_p99_us=0 R_non2xx=? R_sock_errors=? R_statuses=?
    [ -f $T/r.result ] && eval "$(tr ' ' '\n' <$T/r.result | grep -E '^(rps|p50_us|p99_us|non2xx|sock_errors|statuses)=' | sed 's/^/R_/')"
    rate=$R_rps
    lat=$(awk -v a=$R_p50_us -v b=$R_p99_us 'BEGIN{printf "p50/p99 ms %.1f/%.1f", a/1000, b/1000}')
    [ "$R_non2xx$R_sock_errors" = 00 ] || lat="$lat (non2xx $R_non2xx errors $R_sock_errors statuses $R_statuses)"
    sleep 1  # the user-list fold of the last writes (it follows the logs)
    for i in $insts; do st[$i]=$(P $i -d t -c "$STATS" | tr '|' ' '); done
    [ $scen != viral_keyed ] && [ $n = 2 ] && [ -f $T/r.pairs ] && predicted $T/r.pairs "$(P 0 -d t -c "SELECT convert_from(value, 'UTF8') FROM tally_aux WHERE key = 'cluster/identity'")" >$T/pred
    for i in $insts; do
      P $i -d t -F'|' -c "SELECT calls, total_exec_time, regexp_replace(left(query, 70), '\s+', ' ', 'g') FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE 'DO %' ORDER BY total_exec_time DESC LIMIT ${TOP:-6}" >$T/top$i
    done
    stop
  fi
  echo "$rate" >$T/$1.$R
  printf '%-14s %6.0f/s  %s  (load %s)\n' $1 $rate "$lat" $load
  awk -v m=$((mt1 - mt0)) -v g0=$((${pt1[0]} - ${pt0[0]})) -v g1=$((${pt1[1]} - ${pt0[1]})) -v t=$((tt1 - tt0)) -v gen=$gen -v k=$CLK -v el=$el -v r=$rate -v secs=$SECS \
    'BEGIN{n = r*secs; printf "   cpu %% of a core: tallyd %.0f  postgres A %.0f B %.0f  wrk/pgbench %.0f  machine %.0f | us a write: tallyd %.1f  postgres A %.0f B %.0f  generator %.0f\n",
      100*t/k/el, 100*g0/k/el, 100*g1/k/el, 100*gen/el, 100*m/k/el, 1e6*t/k/n, 1e6*g0/k/n, 1e6*g1/k/n, 1e6*gen/n}'
  [ $n = 0 ] && { echo "${w0[0]} ${w1[0]}" | awk -v r=$rate -v secs=$SECS '{n = r*secs; printf "   WAL %.0f B a transaction, %.3f syncs a transaction\n", ($4-$1)/n, ($5-$2)/n}'; return; }
  echo "$wt0 $wt1" | awk -v el=$el1 '{printf "   schedstat %% of the time: writer threads on-CPU %.0f run-queue %.0f", ($3-$1)/el/1e7, ($4-$2)/el/1e7}'
  for i in $insts; do echo "${bt0[$i]} ${bt1[$i]}" | awk -v el=$el1 -v s=$i '{printf " | shard %d writer backend on-CPU %.0f run-queue %.0f", s, ($3-$1)/el/1e7, ($4-$2)/el/1e7}'; done
  echo
  # a shard's writes: its stored keyed writes (tally_idem rows), or its log entries when unkeyed
  local tot=0; for i in $insts; do tot=$((tot + $(echo ${st[$i]} | awk '{print $11 ? $11 : $12}'))); done
  [ -f $T/pred ] && cat $T/pred && rm -f $T/pred
  for i in $insts; do
    local snd rcv; snd=$(awk -F, '/sendto/{print $1}' $T/ps$i) rcv=$(awk -F, '/recvfrom/{print $1}' $T/ps$i)
    echo "${st[$i]} ${w0[$i]} ${w1[$i]}" | awk -v s=$i -v tot=$tot -v n=$n -v snd=${snd:-0} -v rcv=${rcv:-0} -v secs=$SECS -v c=$([ $i = 0 ] && echo $((${c1%.*} - ${c0%.*})) || echo -) -v rt=$([ $i = 0 ] && echo $((${rt1%.*} - ${rt0%.*})) || echo -) '{
      own = $11 ? $11 : $12; t = tot ? tot : 1; o = own ? own : 1;
      wb = ($4 > $8 ? $4 : $8); b = (wb > $5 ? wb : $5); b = b ? b : 1;  # batches: at least the larger of the two kinds
      if (!own) {  # a shard that holds none of the writes (shard 0 of viral-2shards): per write of all only
        printf "   shard %d: writes 0 (of %d)  claims %d  log %d  lists %d | WAL %.0f B a write of all | statements %.2f a write of all | writer: %d batches of claims (commits: %s), round trips (sends) %.3f a write of all, %.2f a batch%s\n",
          s, tot, $13, $12, $14, ($18-$15)/t, $1/t, $5, c, snd/t, snd/b, c == "-" ? "" : sprintf(" (%.2f a commit)", snd/(c ? c : 1))
        printf "      claims: %d calls (%.3f a write of all), %.1f us of execution a write of all; the user-list fold from other shards: %d calls, %.1f us a write of all\n",
          $2, $2/t, 1000*$3/t, $6, 1000*$7/t
        exit
      }
      printf "   shard %d: writes %d (%.1f%% of %d)  claims %d  log %d  lists %d | WAL %.0f B a write of all, %.0f B a write of its own, %.3f syncs a write of its own\n",
        s, own, 100*own/t, tot, $13, $12, $14, ($18-$15)/t, ($18-$15)/o, ($19-$16)/o
      printf "      statements %.2f a write of all, %.2f of its own (COMMIT %.3f) | writer: %d batches of writes, %d of claims (commits: %s), %.1f writes a batch, round trips (sends) %.3f a write of its own, %.2f a batch%s; recvs %.2f a batch\n",
        $1/t, $1/o, $9/o, wb, $5, c, own/(wb ? wb : 1), snd/o, snd/b, c == "-" ? "" : sprintf(" (%.2f a commit; tallyd counts %.2f)", snd/(c ? c : 1), rt/(c ? c : 1)), rcv/b
      printf "      claims: %d calls (%.3f a write of all), %.1f us of execution a write of all; the user-list fold from other shards: %d calls, %.1f us a write of all; all statements %.1f us a write of its own\n",
        $2, $2/t, 1000*$3/t, $6, 1000*$7/t, 1000*$10/o}'
    awk -F'|' -v s=$i '{a[$1] = a[$1] sprintf(" %s %d;", $2, $3); t[$1] += $3} END {for (k in a) printf "      shard %d sessions %s (%d samples):%s\n", s, k, t[k], a[k]}' $T/samp$i
    [ -s $T/top$i ] && awk -F'|' -v s=$i -v tot=$tot '{printf "      stmt s%d %7d calls %.3f a write  %6.1f us a write  %s\n", s, $1, $1/tot, 1000*$2/tot, $3}' $T/top$i
  done
}
echo "pg_shards: $(date -u +%FT%TZ) $BIN ($(git rev-parse --short HEAD 2>/dev/null)) $SECS s per figure, $ROUNDS rounds, nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
ALL="keyed-1 keyed-2shards viral-1 viral-2shards write-1 write-2shards peer"
for n in 1 2; do  # what a node and its databases spend with no load at all (followers' polls, folds' timers)
  start $n; sleep 1; a=$(tallyd_ticks) b=$(pg_ticks 0) c=$(pg_ticks 1); sleep 4
  awk -v a=$(( $(tallyd_ticks) - a )) -v b=$(( $(pg_ticks 0) - b )) -v c=$(( $(pg_ticks 1) - c )) -v k=$CLK -v n=$n \
    'BEGIN{printf "idle, %d shard(s): cpu %% of a core over 4 s: tallyd %.1f  postgres A %.1f B %.1f\n", n, 100*a/k/4, 100*b/k/4, 100*c/k/4}'
  stop
done
for R in $(seq 1 $ROUNDS); do
  set -- $ALL; k=$(((R - 1) % $#)); order="${*:$((k + 1))} ${*:1:$k}"  # rotated by one each round
  [ -n "${FIGURES:-}" ] && order=$FIGURES
  echo "-- round $R: $order"
  for f in $order; do figure $f; done
done
pool() { local s=0 r; for r in $(seq 1 $ROUNDS); do s=$(awk -v a=$s -v b=$(cat $T/$1.$r) 'BEGIN{print a+b}'); done; echo $s; }
[ -n "${FIGURES:-}" ] && exit 0
printf '%-28s' "round:"; for R in $(seq 1 $ROUNDS); do printf ' %8s' $R; done; printf ' %9s\n' pooled
for f in $ALL; do printf '%-28s' $f; for R in $(seq 1 $ROUNDS); do printf ' %8.0f' $(cat $T/$f.$R); done; printf ' %9.0f\n' $(pool $f); done
ratio() { printf '%-28s' "$1 / $2"; for R in $(seq 1 $ROUNDS); do awk -v a=$(cat $T/$1.$R) -v b=$(cat $T/$2.$R) 'BEGIN{printf " %8.2f", a/b}'; done
  awk -v a=$(pool $1) -v b=$(pool $2) 'BEGIN{printf " %9.2f\n", a/b}'; }
ratio keyed-2shards keyed-1; ratio viral-2shards keyed-2shards; ratio viral-1 keyed-1; ratio viral-2shards viral-1
ratio write-2shards write-1; ratio keyed-1 write-1; ratio keyed-2shards write-2shards
ratio keyed-1 peer; ratio keyed-2shards peer
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
