#!/bin/bash
# bench/pg_rt.sh — the writer's round trips per batch: two tallyd builds
# side by side on one throwaway cluster (127.0.0.1:56443, pg_bench.sh's settings), with the peers'
# B_zipf.sql in the same run. Not part of the test suite; prints figures, never fails on them.
#
#   bench/pg_rt.sh BEFORE_TALLYD AFTER_TALLYD [SECONDS] [ROUNDS]     (from the project root, as root)
#
# Per round (the order reversed in even rounds): peer-write (pgbench -M prepared -c16 -j2), then
# keyed-1 (1 node, wrk -c64) and keyed-2 (2 nodes, two wrk -c32) for each build, every tally figure
# on a fresh database. Each line: rate, p50/p99 ms, commits/s, commands per commit, mean COMMIT ms.
# Last, a probe per build (1 node, keyed, not a figure: strace slows the writer): strace -f -tt -T
# of the writer thread's sendto/recvfrom/poll for 2 s of a keyed load, summed by
# bench/pg_rt_probe.py into round trips per commit and where a cycle's time goes; before it, the
# writer's backend sampled every 10 ms (pg_stat_activity: its state, wait event and statement).
# ONE_NODE=1: keyed-1 only; PROBE=0: no probes; RATE=N: the keyed figures paced at N a second (their
# p50/p99 are then the latency at that rate).
set -u
cd "$(dirname "$0")/.."
PEERS=$(cd "${PEERS:?set PEERS to the folder of the peer scripts (pg_schema.sql, B_zipf.sql)}" && pwd) || exit 2
A=$1 B=$2 SECS=${3:-8} ROUNDS=${4:-2}
T=$(mktemp -d /tmp/tally-rt.XXXX); chmod 755 $T; mkdir -p $T/pg; chown postgres:postgres $T/pg
PGB=/usr/lib/postgresql/15/bin PORT=56443
cp "$A" $T/rt-before; cp "$B" $T/rt-after
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  runuser -u postgres -- $PGB/pg_ctl -D $T/pg/d -m fast -w stop >/dev/null 2>&1; rm -rf $T
}
trap cleanup EXIT
runuser -u postgres -- $PGB/initdb -D $T/pg/d -A trust -E UTF8 --no-locale >/dev/null
printf "port=$PORT\nlisten_addresses='127.0.0.1'\nunix_socket_directories='$T/pg'\nmax_connections=100\nshared_buffers=2GB\nmax_wal_size=8GB\ncheckpoint_timeout=30min\n" >>$T/pg/d/postgresql.conf
runuser -u postgres -- $PGB/pg_ctl -D $T/pg/d -l $T/pg/log -w start >/dev/null
P() { psql -h 127.0.0.1 -p $PORT -U postgres -qtAX "$@"; }
P -c "CREATE DATABASE bench" >/dev/null; P -d bench -f $PEERS/pg_schema.sql >/dev/null
P -d bench -c "ALTER TABLE reactions DISABLE TRIGGER reactions_counts" >/dev/null

start() { # BIN N: N nodes on a fresh database t; URLs in U
  P -c "DROP DATABASE IF EXISTS t" -c "CREATE DATABASE t" >/dev/null 2>&1
  PIDS=() U=()
  for i in $(seq 1 $2); do
    $T/$1 --listen 127.0.0.1:0 --store postgresql://postgres@127.0.0.1:$PORT/t --rate-limit off --read-rate-limit off >$T/out$i 2>$T/err$i &
    PIDS+=($!)
    local u=""; for _ in $(seq 100); do u=$(grep -o 'http://127.0.0.1:[0-9]*' $T/out$i 2>/dev/null | head -1); [ -n "$u" ] && break; sleep 0.1; done
    for _ in $(seq 50); do curl -sf -o /dev/null $u/readyz && break; sleep 0.1; done
    U+=("$u")
  done
  P -d t -c CHECKPOINT >/dev/null
}
stop() { for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p"; done; PIDS=(); }
m() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
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
# the writer's counters summed over the nodes: its batches (tally_writer_commits_total: the folds' commits are not theirs), batch commands sum and count, commit
# seconds sum and count (one line, in that order)
writer_sums() {
  local u metric line=""
  for metric in tally_writer_commits_total tally_writer_batch_commands_sum tally_writer_batch_commands_count \
      tally_db_commit_seconds_sum tally_db_commit_seconds_count; do
    line="$line $(for u in "${U[@]}"; do m $u $metric; done | awk '{t += $1} END {print t + 0}')"
  done
  echo $line
}
keyed() { # BIN N
  start $1 $2
  local c0 n0 s0 cs0 cc0 c1 n1 s1 cs1 cc1 i pids=() rps=0 lat=""
  read -r c0 s0 n0 cs0 cc0 < <(writer_sums)
  local mt0 pt0 tt0 t0; mt0=$(machine_ticks) pt0=$(pg_ticks) tt0=$(tallyd_ticks) t0=$(date +%s.%N)
  for i in $(seq 1 $2); do
    # RATE=N: paced at N keyed writes a second in all (each node's wrk its share), for the latency
    wrk -t1 -c$((64 / $2)) -d${SECS}s --latency --timeout 10s -s bench/load.lua ${U[$((i - 1))]} -- \
      ${RATE:+paced_}keyed tally $T/r$i $RANDOM$i ${RATE:+$((RATE / $2))} >/dev/null 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait $p; done
  local cpu; cpu=$(awk -v m=$(($(machine_ticks) - mt0)) -v g=$(($(pg_ticks) - pt0)) -v t=$(($(tallyd_ticks) - tt0)) -v k=$CLK \
    -v el=$(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{print b - a}') 'BEGIN{printf "cpu%%: tallyd %.0f postgres %.0f machine %.0f", 100*t/k/el, 100*g/k/el, 100*m/k/el}')
  read -r c1 s1 n1 cs1 cc1 < <(writer_sums)
  stop
  for i in $(seq 1 $2); do
    eval "$(tr ' ' '\n' <$T/r$i.result | grep -E '^(rps|p50_us|p99_us|non2xx|sock_errors)=' | sed 's/^/R_/')"
    rps=$(awk -v a=$rps -v b=$R_rps 'BEGIN{print a+b}')
    lat="$lat$(awk -v a=$R_p50_us -v b=$R_p99_us 'BEGIN{printf "%.1f/%.1f ", a/1000, b/1000}')"
    [ "$R_non2xx$R_sock_errors" = 00 ] || lat="$lat(non2xx $R_non2xx errors $R_sock_errors) "
  done
  printf '%-16s %6.0f/s  p50/p99 ms %s| %s\n' "keyed-$2 ${1#rt-}" $rps "$lat" \
    "$(awk -v c=$((${c1%.*} - ${c0%.*})) -v s=$s1 -v s0=$s0 -v n=$n1 -v n0=$n0 -v cs=$cs1 -v cs0=$cs0 -v cc=$cc1 -v cc0=$cc0 -v t=$SECS \
       'BEGIN{printf "%.0f commits/s %.1f cmds/commit COMMIT %.2f ms", c/t, (s-s0)/(n-n0), 1000*(cs-cs0)/(cc-cc0)}') | $cpu"
  echo $rps >$T/keyed-$2-${1#rt-}.$R
}
peer() {
  P -d bench -c "TRUNCATE reactions, transitions, idempotency, counts RESTART IDENTITY" -c "UPDATE agg_checkpoint SET seq=0" -c CHECKPOINT >/dev/null
  local tps; tps=$(PGOPTIONS='-c synchronous_commit=on' pgbench -h 127.0.0.1 -p $PORT -U postgres -n -M prepared -c 16 -j 2 -T $SECS -f $PEERS/B_zipf.sql bench 2>/dev/null | awk '/^tps = /{print $3}')
  printf '%-16s %6.0f/s\n' peer-write $tps
  echo $tps >$T/peer.$R
}
probe() { # BIN: where the writer's backend spends a cycle (4 s of samples), then strace the writer thread (2 s)
  start $1 1
  wrk -t1 -c64 -d10s --timeout 10s -s bench/load.lua ${U[0]} -- keyed tally $T/probe $RANDOM >/dev/null 2>&1 &
  local wp=$! tid wpid
  sleep 1.5
  # the writer's backend (the fold has a session of its own, "tallyd fold")
  wpid=$(P -d t -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'tallyd writer' LIMIT 1")
  P -d t >/dev/null 2>&1 <<SQL
CREATE TEMP TABLE samp (state text, ev text, q text);
DO \$\$ BEGIN FOR i IN 1..400 LOOP PERFORM pg_stat_clear_snapshot();
  INSERT INTO samp SELECT state, coalesce(wait_event_type || ':' || wait_event, 'on-CPU'), left(query, 24)
    FROM pg_stat_activity WHERE pid = ${wpid:-0};
  PERFORM pg_sleep(0.01); END LOOP; END \$\$;
\\o $T/samp.$1
SELECT count(*) * 100.0 / sum(count(*)) OVER (), state, CASE WHEN state = 'active' THEN ev ELSE '' END,
  CASE WHEN state = 'active' THEN q ELSE '' END FROM samp GROUP BY 2, 3, 4 ORDER BY 1 DESC LIMIT 14;
SQL
  awk -F'|' '{printf "  writer backend %s: %.0f%% %s %s %s\n", b, $1, $2, $3, $4}' b=${1#rt-} $T/samp.$1
  tid=$(grep -l writer /proc/${PIDS[0]}/task/*/comm | head -1 | awk -F/ '{print $5}')
  local c0; c0=$(m ${U[0]} tally_writer_commits_total)
  timeout 2 strace -q -tt -T -p $tid -s 96 -e trace=sendto,recvfrom,poll,ppoll -o $T/strace.$1 2>/dev/null
  local c1; c1=$(m ${U[0]} tally_writer_commits_total)
  wait $wp
  [ $1 = rt-after ] && P -d t -c "EXPLAIN ANALYZE SELECT seq, item, \"user\", from_kind, to_kind, version, at_ms FROM tally_log
      WHERE seq > coalesce((SELECT checkpoint FROM tally_pipeline WHERE id = 1), 0) AND seq <= coalesce((SELECT checkpoint
      FROM tally_pipeline WHERE id = 1), 0) + 65537 ORDER BY seq LIMIT 65537" | sed 's/^/  explain fold scan: /'
  stop
  cp $T/strace.$1 /tmp/pgrt-strace.${1#rt-} 2>/dev/null
  echo "probe ${1#rt-}: $(python3 bench/pg_rt_probe.py $T/strace.$1 $((${c1%.*} - ${c0%.*})))"
}
echo "pg_rt: $(date -u +%FT%TZ) before=$A after=$B $SECS s per figure, $ROUNDS rounds"
for R in $(seq 1 $ROUNDS); do
  order="peer rt-before:1 rt-after:1 rt-before:2 rt-after:2"
  [ $((R % 2)) = 0 ] && order="rt-after:2 rt-before:2 rt-after:1 rt-before:1 peer"
  [ "${ONE_NODE:-0}" = 1 ] && order=$(echo $order | tr ' ' '\n' | grep -v ':2' | tr '\n' ' ')
  for x in $order; do if [ $x = peer ]; then peer; else keyed ${x%:*} ${x#*:}; fi; done
done
NODES="1 2"; [ "${ONE_NODE:-0}" = 1 ] && NODES=1
for n in $NODES; do for b in before after; do
  printf 'ratio keyed-%s %-6s / peer per round:' $n $b
  for R in $(seq 1 $ROUNDS); do awk -v x=$(cat $T/keyed-$n-$b.$R) -v y=$(cat $T/peer.$R) 'BEGIN{printf " %.2f", x/y}'; done; echo
done; done
printf 'ratio after / before per round:'; for n in $NODES; do for R in $(seq 1 $ROUNDS); do
  awk -v n=$n -v x=$(cat $T/keyed-$n-after.$R) -v y=$(cat $T/keyed-$n-before.$R) 'BEGIN{printf " keyed-%s %.2f", n, x/y}'; done; done; echo
[ "${PROBE:-1}" = 1 ] && { probe rt-before; probe rt-after; }
