#!/bin/bash
# bench/pg_nodes.sh — one node, two nodes and the peers' pgbench transaction, keyed durable writes,
# alternating on one throwaway cluster, with what binds each. Not part of the test suite; prints
# figures, never fails on them.
#
#   PEERS=DIR bench/pg_nodes.sh [TALLYD] [SECONDS] [ROUNDS]       (from the project root, as root)
#
# The cluster: pg_bench.sh's settings (fsync, synchronous_commit on, shared_buffers 2GB) plus
# pg_stat_statements (no planning tracking) and track_wal_io_timing, on 127.0.0.1:$PG_PORT (56447).
# Per round, the order rotated: keyed-1 (1 node, wrk -t1 -c64 keyed), keyed-2 (2 nodes on one
# database, two wrk -t1 -c32, one per node), peer (the peers' B_zipf.sql, pgbench -M prepared -c16
# -j2 on the peers' schema, tables truncated). Every tally figure on a fresh database. Per figure:
#   - rate; CPU in % of one core of tallyd (and of its writer threads alone), of PostgreSQL, of the
#     load generator (wrk / pgbench, by /usr/bin/time), of the machine; load average before it
#   - schedstat of the writer threads and of the writer sessions' backends: on-CPU and run-queue
#     wait in % of the figure's time (run-queue wait = ready but no core free)
#   - WAL bytes and WAL syncs per write (pg_current_wal_lsn, pg_stat_wal), mean sync ms
#   - the writers' commits/s, commands per commit, mean COMMIT ms (tallyd's /metrics)
#   - pg_stat_statements of the figure's database: per commit, ms of execution of the log head's
#     statement, of the answers' counts statement (both under the head's lock) and of COMMIT
#     (the flush itself is not in it: pg_stat_wal's ms a sync is)
#   - the database's sessions sampled every 50 ms (pg_stat_activity): by session name, its wait
#     event, or on-CPU; for a Lock wait, the blocker's wait event
# PERF=1: perf record -a -g for half of each figure, PostgreSQL's time by stage (parse, plan, execute,
# commit, WAL flush, lock waits, socket I/O). Last, the figures side by side and the pooled ratios. FIGURES="keyed-1 ...": only those, in that
# order, every round (no ratios); NODE_ARGS: more tallyd flags (e.g. --batch-max 16); STORE_QUERY:
# appended to the store URI (e.g. ?options=-c%20synchronous_commit%3Doff, a proxy: no flush at all).
set -u
cd "$(dirname "$0")/.."
PEERS=$(cd "${PEERS:?set PEERS to the folder of the peer scripts (pg_schema.sql, B_zipf.sql)}" && pwd) || exit 2
BIN=${1:-build/tallyd} SECS=${2:-10} ROUNDS=${3:-3}
PORT=${PG_PORT:-56447} PGB=/usr/lib/postgresql/15/bin
T=$(mktemp -d /tmp/tally-nodes.XXXX); chmod 755 $T; mkdir -p $T/pg; chown postgres:postgres $T/pg
cp "$BIN" $T/tallyd
[ -n "${BEFORE:-}" ] && cp "$BEFORE" $T/tallyd-before
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  runuser -u postgres -- $PGB/pg_ctl -D $T/pg/d -m fast -w stop >/dev/null 2>&1
  [ "${BENCH_KEEP:-0}" = 1 ] && echo "kept $T" >&2 || rm -rf $T
}
trap cleanup EXIT
runuser -u postgres -- $PGB/initdb -D $T/pg/d -A trust -E UTF8 --no-locale >/dev/null
cat >>$T/pg/d/postgresql.conf <<CONF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$T/pg'
max_connections = 100
shared_buffers = 2GB
max_wal_size = 8GB
checkpoint_timeout = 30min
track_wal_io_timing = on
shared_preload_libraries = 'pg_stat_statements'
CONF
runuser -u postgres -- $PGB/pg_ctl -D $T/pg/d -l $T/pg/log -w start >/dev/null || exit 1
P() { psql -h 127.0.0.1 -p $PORT -U postgres -qtAX "$@"; }
P -c "CREATE DATABASE bench" >/dev/null; P -d bench -f $PEERS/pg_schema.sql >/dev/null
P -d bench -c "ALTER TABLE reactions DISABLE TRIGGER reactions_counts" -c "CREATE EXTENSION pg_stat_statements" >/dev/null

CLK=$(getconf CLK_TCK)
machine_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
pid_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() { # the postmaster, its exited children and the living ones
  local pm t c; pm=$(head -1 $T/pg/d/postmaster.pid)
  t=$(awk '{print $14+$15+$16+$17}' /proc/$pm/stat)
  for c in $(cat /proc/$pm/task/$pm/children 2>/dev/null); do t=$((t + $(pid_ticks $c))); done
  echo $t
}
tallyd_ticks() { local t=0 p; for p in "${PIDS[@]}"; do t=$((t + $(pid_ticks $p))); done; echo $t; }
# schedstat (on-CPU ns, run-queue wait ns) summed over the tasks named: "tid tid ..." -> "run wait"
sched() { local r=0 w=0 a b x; for x in "$@"; do read -r a b _ <"$x" 2>/dev/null || continue; r=$((r + a)); w=$((w + b)); done; echo $r $w; }
writer_tasks() { local p t; for p in "${PIDS[@]}"; do for t in /proc/$p/task/*; do
  [ "$(cat $t/comm 2>/dev/null)" = tally-writer ] && echo $t/schedstat; done; done; }
backend_tasks() { # the writer sessions' backends (pg_stat_activity names them), or pgbench's
  local p; for p in $(P -d $1 -c "SELECT pid FROM pg_stat_activity WHERE application_name IN ('tallyd writer', 'pgbench')"); do echo /proc/$p/schedstat; done; }
m() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
writer_sums() { # over the nodes: commits, batch commands sum, count, commit seconds sum, count
  local u metric line=""
  for metric in tally_writer_commits_total tally_writer_batch_commands_sum tally_writer_batch_commands_count \
      tally_db_commit_seconds_sum tally_db_commit_seconds_count tally_writer_conflict_retries_total; do
    line="$line $(for u in "${U[@]}"; do m $u $metric; done | awk '{t += $1} END {printf "%.6f", t + 0}')"
  done
  echo $line
}
wal() { P -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_sync, wal_sync_time FROM pg_stat_wal" | tr '|' ' '; }
start() { # N [BINARY]: N nodes on a fresh database t; URLs in U
  P -c "DROP DATABASE IF EXISTS t" -c "CREATE DATABASE t" >/dev/null 2>&1
  P -d t -c "CREATE EXTENSION pg_stat_statements" >/dev/null
  PIDS=() U=()
  for i in $(seq 1 $1); do
    $T/${2:-tallyd} --listen 127.0.0.1:0 --store "postgresql://postgres@127.0.0.1:$PORT/t${STORE_QUERY:-}" --rate-limit off --read-rate-limit off ${NODE_ARGS:-} >$T/out$i 2>$T/err$i &
    PIDS+=($!)
    local u=""; for _ in $(seq 100); do u=$(grep -o 'http://127.0.0.1:[0-9]*' $T/out$i 2>/dev/null | head -1); [ -n "$u" ] && break; sleep 0.1; done
    for _ in $(seq 50); do curl -sf -o /dev/null $u/readyz && break; sleep 0.1; done
    [ -n "$u" ] || echo "   VOID: node $i did not start: $(tail -2 $T/err$i)"
    U+=("$u")
  done
  P -d t -c CHECKPOINT >/dev/null
}
stop() { for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p"; done; PIDS=(); }
sampler() { # DB: the database's sessions every 50 ms for SECS - 1 s, into $T/samp (app | event | n)
  P -d $1 >$T/samp 2>/dev/null <<SQL
CREATE TEMP TABLE s (app text, ev text);
DO \$\$ BEGIN FOR i IN 1..$(((SECS - 1) * 20)) LOOP PERFORM pg_stat_clear_snapshot();
  INSERT INTO s SELECT CASE WHEN application_name LIKE 'tallyd%' THEN application_name ELSE 'client' END,
    CASE WHEN a.state <> 'active' THEN a.state WHEN a.wait_event_type = 'Lock' THEN 'Lock:' || a.wait_event || ' <- ' ||
      coalesce((SELECT coalesce(b.wait_event_type || ':' || b.wait_event, b.state || ' on-CPU') || ' ' ||
        CASE WHEN b.query LIKE 'WITH h AS (UPDATE tally_log_head%' THEN 'log-head' WHEN b.query ILIKE 'commit%' THEN 'COMMIT'
          WHEN b.query LIKE 'WITH a AS%' THEN 'asks' ELSE left(b.query, 12) END
        FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(a.pid))[1]), '?')
      ELSE coalesce(a.wait_event_type || ':' || a.wait_event, 'on-CPU') END
    FROM pg_stat_activity a WHERE a.datname = '$1' AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend';
  PERFORM pg_sleep(0.05); END LOOP; END \$\$;
SELECT app, ev, count(*) FROM s GROUP BY 1, 2 ORDER BY 1, 3 DESC;
SQL
}
# the log head's statement, the answers' counts and COMMIT (every session's: the fold's and the
# readers' are short, no flush): execution ms, per writer commit
STMTS="SELECT coalesce(sum(total_exec_time) FILTER (WHERE query LIKE 'WITH h AS (UPDATE tally_log_head%'), 0),
  coalesce(sum(total_exec_time) FILTER (WHERE query LIKE 'WITH a AS%'), 0),
  coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE 'commit%'), 0),
  coalesce(sum(calls) FILTER (WHERE query ILIKE 'commit%'), 0),
  coalesce(sum(total_exec_time), 0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
perf_report() { # PostgreSQL's samples: the share of its on-CPU time under each stage (children included)
  local tot; tot=$(perf report -i $T/perf.data --comms postgres --no-children --sort comm --stdio 2>/dev/null | awk '/^ +[0-9.]+%/{print $1}' | tr -d %)
  echo "   perf: postgres $tot% of all samples; of them, under (children included):$(perf report -i $T/perf.data --comms postgres --children --sort symbol --stdio -g none 2>/dev/null |
    awk -v tot=$tot '$NF ~ /^(pg_parse_query|parse_analyze_fixedparams|parse_analyze_varparams|pg_analyze_and_rewrite_fixedparams|pg_plan_queries|standard_ExecutorRun|CommitTransaction|XLogFlush|issue_xlog_fsync|LockAcquireExtended|pq_getbyte|secure_read|secure_write|ProcSleep|exec_bind_message|RecordTransactionCommit|ExecInitNode|ExecEndNode)$/ {gsub("%", "", $1); printf " %s %.0f%%", $NF, 100 * $1 / tot}')"
}
figure() { # NAME
  local n=0 db=t
  case $1 in keyed-1*) n=1 ;; keyed-2*) n=2 ;; peer) db=bench ;; esac
  local bin=tallyd; case $1 in *-before) bin=tallyd-before ;; esac
  if [ $n = 0 ]; then
    P -d bench -c "TRUNCATE reactions, transitions, idempotency, counts RESTART IDENTITY" -c "UPDATE agg_checkpoint SET seq=0" -c CHECKPOINT >/dev/null
  else start $n $bin; fi
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  P -d $db -c "SELECT pg_stat_statements_reset()" >/dev/null
  local c0 w0 wt0 bt0 mt0 pt0 tt0 t0 wk=() i
  [ $n != 0 ] && c0=$(writer_sums)
  w0=$(wal); wt0=$(sched $(writer_tasks)); bt0=$(sched $(backend_tasks $db)); mt0=$(machine_ticks) pt0=$(pg_ticks) tt0=$(tallyd_ticks) t0=$(date +%s.%N)
  if [ $n = 0 ]; then
    PGOPTIONS='-c synchronous_commit=on' /usr/bin/time -f '%U %S' -o $T/gen1 pgbench -h 127.0.0.1 -p $PORT -U postgres -n -M prepared \
      -c 16 -j 2 -T $SECS -f $PEERS/B_zipf.sql bench >$T/pgb 2>&1 &
    wk+=($!)
  else
    rm -f $T/r*.result  # a figure whose wrk failed reads none of the last one's
    for i in $(seq 1 $n); do
      /usr/bin/time -f '%U %S' -o $T/gen$i wrk -t1 -c$((64 / n)) -d${SECS}s --latency --timeout 10s -s bench/load.lua ${U[$((i - 1))]} -- \
        keyed tally $T/r$i $RANDOM$i >/dev/null 2>&1 &
      wk+=($!)
    done
  fi
  sleep 0.5; sampler $db &
  local sp=$! pp=""
  if [ "${PERF:-0}" = 1 ]; then perf record -F 499 -a -g -o $T/perf.data -- sleep $((SECS / 2)) >/dev/null 2>&1 & pp=$!; fi
  # the backends' schedstat is read before the load ends (they live until the nodes stop)
  sleep $((SECS - 1)); local bt1; bt1=$(sched $(backend_tasks $db)); local wt1; wt1=$(sched $(writer_tasks))
  local el1; el1=$(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{print b - a}')
  for p in "${wk[@]}"; do wait $p; done
  wait $sp
  [ -n "$pp" ] && wait $pp && perf_report
  local el; el=$(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{print b - a}')
  local mt1 pt1 tt1 w1 c1 st rate=0 lat="" gen=0
  mt1=$(machine_ticks) pt1=$(pg_ticks) tt1=$(tallyd_ticks) w1=$(wal)
  st=$(P -d $db -c "$STMTS" | tr '|' ' ')
  P -d $db -F'|' -c "SELECT calls, total_exec_time, rows, regexp_replace(left(query, 60), '\s+', ' ', 'g') FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE 'DO %' ORDER BY total_exec_time DESC LIMIT ${TOP:-8}" >$T/top
  for i in $(seq 1 $([ $n = 0 ] && echo 1 || echo $n)); do
    # /usr/bin/time's last line; a line before it says the load generator failed (the figure is void)
    [ "$(wc -l <$T/gen$i)" = 1 ] || echo "   VOID: load generator $i: $(head -1 $T/gen$i)"
    gen=$(tail -1 $T/gen$i | awk -v g=$gen '{print g + $1 + $2}')
  done
  if [ $n = 0 ]; then
    rate=$(awk '/^tps = /{print $3}' $T/pgb); lat="avg $(awk '/^latency average/{print $4}' $T/pgb) ms"
  else
    c1=$(writer_sums)
    for i in $(seq 1 $n); do
      R_rps=0 R_p50_us=0 R_p99_us=0 R_non2xx=? R_sock_errors=?
      [ -f $T/r$i.result ] && eval "$(tr ' ' '\n' <$T/r$i.result | grep -E '^(rps|p50_us|p99_us|non2xx|sock_errors)=' | sed 's/^/R_/')"
      rate=$(awk -v a=$rate -v b=$R_rps 'BEGIN{print a+b}')
      lat="$lat$(awk -v a=$R_p50_us -v b=$R_p99_us 'BEGIN{printf "%.1f/%.1f ", a/1000, b/1000}')"
      [ "$R_non2xx$R_sock_errors" = 00 ] || lat="$lat(non2xx $R_non2xx errors $R_sock_errors) "
    done
    lat="p50/p99 ms $lat"
    stop
  fi
  echo "$rate" >$T/$1.$R
  printf '%-8s %6.0f/s  %s  (load %s)\n' $1 $rate "$lat" $load
  awk -v m=$((mt1 - mt0)) -v g=$((pt1 - pt0)) -v t=$((tt1 - tt0)) -v gen=$gen -v k=$CLK -v el=$el -v r=$rate -v secs=$SECS \
    'BEGIN{printf "   cpu %% of a core: tallyd %.0f  postgres %.0f  load generator %.0f  machine %.0f | us a write: tallyd %.0f postgres %.0f generator %.0f\n",
      100*t/k/el, 100*g/k/el, 100*gen/el, 100*m/k/el, 1e6*t/k/(r*secs), 1e6*g/k/(r*secs), 1e6*gen/(r*secs)}'
  echo "$wt0 $wt1 $bt0 $bt1" | awk -v el=$el1 '{printf "   schedstat %% of the time: writer threads on-CPU %.0f run-queue %.0f | writer backends on-CPU %.0f run-queue %.0f\n",
      ($3-$1)/el/1e7, ($4-$2)/el/1e7, ($7-$5)/el/1e7, ($8-$6)/el/1e7}'
  echo "$w0 $w1" | awk -v r=$rate -v secs=$SECS '{n = r*secs; printf "   WAL %.0f B a write, %.3f syncs a write, %.0f syncs/s at %.2f ms\n", ($4-$1)/n, ($5-$2)/n, ($5-$2)/secs, ($5-$2) ? ($6-$3)/($5-$2) : 0}'
  if [ $n != 0 ]; then
    echo "$c0 $c1 $st" | awk -v secs=$SECS -v el=$el '{c = $7-$1; cm = c ? c : 1;
      printf "   writers: %.0f commits/s, %.1f cmds/commit, COMMIT %.2f ms (tallyd), %d retries | per commit (pg_stat_statements): log head %.3f ms, answers'"'"' counts %.3f ms, COMMIT %.3f ms; head statement (its wait included) + the counts statement %.2f ms a commit, %.0f%% of the time; all statements %.2f ms a commit\n",
        c/secs, ($8-$2)/(($9-$3) ? ($9-$3) : 1), 1000*($10-$4)/(($11-$5) ? ($11-$5) : 1), $12-$6, $13/cm, $14/cm, $15/cm, ($13+$14+$15)/cm, ($13+$14+$15)/el/10, $17/cm}'
  fi
  awk -F'|' -v r=$rate -v secs=$SECS '{printf "   stmt %7d calls %6.1f us a write  %s\n", $1, 1000*$2/(r*secs), $4}' $T/top
  awk -F'|' '{a[$1] = a[$1] sprintf(" %s %d;", $2, $3); t[$1] += $3} END {for (k in a) printf "   sessions %s (%d samples):%s\n", k, t[k], a[k]}' $T/samp
}
echo "pg_nodes: $(date -u +%FT%TZ) $BIN ($(git rev-parse --short HEAD 2>/dev/null)) $SECS s per figure, $ROUNDS rounds, nproc $(nproc)"
for R in $(seq 1 $ROUNDS); do
  ALL="keyed-1 keyed-2 peer"; [ -n "${BEFORE:-}" ] && ALL="keyed-1 keyed-1-before keyed-2 keyed-2-before peer"
  set -- $ALL; k=$(((R - 1) % $#)); order="${*:$((k + 1))} ${*:1:$k}"  # rotated by one each round
  [ -n "${FIGURES:-}" ] && order=$FIGURES
  echo "-- round $R: $order"
  for f in $order; do figure $f; done
done
pool() { local s=0 r; for r in $(seq 1 $ROUNDS); do s=$(awk -v a=$s -v b=$(cat $T/$1.$r) 'BEGIN{print a+b}'); done; echo $s; }
printf '%-22s' "round:"; for R in $(seq 1 $ROUNDS); do printf ' %8s' $R; done; printf ' %9s\n' pooled
[ -n "${FIGURES:-}" ] && exit 0
for f in $ALL; do printf '%-22s' $f; for R in $(seq 1 $ROUNDS); do printf ' %8.0f' $(cat $T/$f.$R); done; printf ' %9.0f\n' $(pool $f); done
ratio() { printf '%-22s' "$1 / $2"; for R in $(seq 1 $ROUNDS); do awk -v a=$(cat $T/$1.$R) -v b=$(cat $T/$2.$R) 'BEGIN{printf " %8.2f", a/b}'; done
  awk -v a=$(pool $1) -v b=$(pool $2) 'BEGIN{printf " %9.2f\n", a/b}'; }
ratio keyed-2 keyed-1; ratio keyed-1 peer; ratio keyed-2 peer
[ -n "${BEFORE:-}" ] && { ratio keyed-2-before keyed-1-before; ratio keyed-1-before peer; ratio keyed-2-before peer; ratio keyed-1 keyed-1-before; ratio keyed-2 keyed-2-before; }
