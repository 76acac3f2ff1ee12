#!/bin/bash
# bench/pg_sweep.sh — ad hoc sensitivity check: keyed writes on 1 node at 64 and 256 connections beside
# the peers' B_zipf.sql at 16 and 64 clients, alternating, on a throwaway cluster (127.0.0.1:56441) with pg_bench.sh's
# settings, 10 s each. Run from the project root as root. Not part of the test suite.
set -u
cd "$(dirname "$0")/.."
PEERS=$(cd "${PEERS:?set PEERS to the folder of the peer scripts (pg_schema.sql, B_zipf.sql)}" && pwd) || exit 2
T=$(mktemp -d /tmp/tally-sweep.XXXX); chmod 755 $T; mkdir -p $T/pg; chown postgres:postgres $T/pg; B=/usr/lib/postgresql/15/bin
trap 'runuser -u postgres -- $B/pg_ctl -D $T/pg/d -m fast -w stop >/dev/null 2>&1; rm -rf $T' EXIT
runuser -u postgres -- $B/initdb -D $T/pg/d -A trust -E UTF8 --no-locale >/dev/null
printf "port=56441\nlisten_addresses='127.0.0.1'\nunix_socket_directories='$T/pg'\nmax_connections=100\nshared_buffers=2GB\nmax_wal_size=8GB\ncheckpoint_timeout=30min\n" >> $T/pg/d/postgresql.conf
runuser -u postgres -- $B/pg_ctl -D $T/pg/d -l $T/pg/log -w start >/dev/null
P() { psql -h 127.0.0.1 -p 56441 -U postgres -qtAX "$@"; }
P -c "CREATE DATABASE bench" >/dev/null; P -d bench -f $PEERS/pg_schema.sql >/dev/null; P -d bench -c "ALTER TABLE reactions DISABLE TRIGGER reactions_counts" >/dev/null
cp build/tallyd $T/sweep-tallyd
keyed() { # conns
  P -c "DROP DATABASE IF EXISTS t" -c "CREATE DATABASE t" >/dev/null 2>&1
  $T/sweep-tallyd --listen 127.0.0.1:0 --store postgresql://postgres@127.0.0.1:56441/t --rate-limit off --read-rate-limit off >$T/out 2>$T/err & local tp=$!
  local U=""; for i in $(seq 100); do U=$(grep -o 'http://127.0.0.1:[0-9]*' $T/out 2>/dev/null | head -1); [ -n "$U" ] && break; sleep 0.1; done
  P -d t -c CHECKPOINT >/dev/null
  wrk -t1 -c$1 -d10s --latency --timeout 10s -s bench/load.lua $U -- keyed tally $T/r $RANDOM >/dev/null 2>&1
  local m=$(curl -s $U/metrics | awk '$1=="tally_writer_batch_commands_sum"{s=$2} $1=="tally_writer_batch_commands_count"{c=$2} END{printf "%.1f cmds/commit", s/c}')
  kill $tp; wait $tp
  echo "keyed-1 c$1: $(tr ' ' '\n' < $T/r.result | grep -E '^(rps|p50_us|p99_us)=' | tr '\n' ' ') $m"
}
peer() { # clients
  P -d bench -c "TRUNCATE reactions, transitions, idempotency, counts RESTART IDENTITY" -c CHECKPOINT >/dev/null
  echo "peer-write c$1: $(PGOPTIONS='-c synchronous_commit=on' pgbench -h 127.0.0.1 -p 56441 -U postgres -n -M prepared -c $1 -j 2 -T 10 -f $PEERS/B_zipf.sql bench 2>/dev/null | grep -E '^(tps|latency average)' | tr '\n' ' ')"
}
peer 16; keyed 64; keyed 256; peer 64; peer 64; keyed 256; keyed 64; peer 16
