#!/usr/bin/env bash
# bench/write_cost.sh — what one request of a load.lua scenario costs tallyd, from the kernel's own
# accounting (/proc/PID/io and /proc/PID/stat around one wrk -t1 -c64 run). Not a test; never run by CI.
#
#   bench/write_cost.sh TALLYD SCENARIO [STORE]
#
# Starts TALLYD on a fresh data directory (or a copy of STORE, e.g. one made by bench/make_store.py),
# runs SCENARIO for BENCH_DURATION seconds (default 8) and prints req/s, bytes passed to write(2)
# calls a request (LMDB's page writes, plus ~0.25 KB of response), bytes read from the disk a
# request, tallyd's CPU a request (all threads) and requests a writer commit.
# BENCH_RATE=N runs a paced scenario (paced, paced_keyed) at N requests a second and adds p50/p99.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/write_cost.sh TALLYD SCENARIO [STORE]" >&2; exit 2; }
BIN=$1 SCEN=$2 STORE=${3:-}
DUR=${BENCH_DURATION:-8}
W=$(mktemp -d /tmp/tally-cost.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
if [ -n "$STORE" ]; then cp -a "$STORE" "$W/data" && sync; fi
"$BIN" --listen 127.0.0.1:0 --data "$W/data" --rate-limit off --read-rate-limit off >"$W/out" 2>"$W/err" &
PID=$!
port=
for _ in $(seq 1 100); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$W/out" 2>/dev/null | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || { cat "$W/err" >&2; exit 1; }
for _ in $(seq 1 600); do # measure once the row filter is in use
    curl -s "http://127.0.0.1:$port/metrics" | grep -q '^tally_row_filter_ready 0' || break
    sleep 0.1
done
io() { awk '/^wchar/ {w = $2} /^read_bytes/ {r = $2} END {print w, r}' "/proc/$PID/io"; }
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
commits() { curl -s "http://127.0.0.1:$port/metrics" | awk '/^tally_writer_commits_total/ {print $2}'; }
read -r w0 r0 < <(io)
c0=$(cpu) m0=$(commits)
wrk -t1 -c64 -d"${DUR}s" --latency -s bench/load.lua "http://127.0.0.1:$port" -- "$SCEN" tally "$W/r" 3 ${BENCH_RATE:-} >/dev/null 2>&1
read -r w1 r1 < <(io)
c1=$(cpu) m1=$(commits)
awk -v w=$((w1 - w0)) -v r=$((r1 - r0)) -v c=$((c1 - c0)) -v m=$((m1 - m0)) -v hz="$(getconf CLK_TCK)" -v d="$DUR" \
    '{for (i = 1; i <= NF; i++) {split($i, kv, "="); x[kv[1]] = kv[2]}}
     END {n = x["requests"] > 0 ? x["requests"] : 1
          printf "%s: %.0f req/s  written %.1f KB/req  read %.1f KB/req  cpu %.0f us/req  %.1f req/commit",
                 "'"$SCEN"'", n / d, w / n / 1024, r / n / 1024, c / hz * 1e6 / n, (m > 0 ? n / m : 0)
          if (x["p99_us"] != "") printf "  p50 %.2f ms  p99 %.2f ms", x["p50_us"] / 1000, x["p99_us"] / 1000
          printf "\n"}' "$W/r.result"
