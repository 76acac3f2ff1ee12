#!/usr/bin/env bash
# bench/compare.sh — two tallyd builds and nginx, one scenario of bench/load.lua, in one run.
# Not part of the test suite; never run by CI.
#
#   bench/compare.sh SCENARIO CONNS PREVIOUS_TALLYD NEW_TALLYD
#
# Runs previous, new, nginx, previous, new (the machine is shared: alternating shows the noise),
# each tallyd on a fresh temporary data directory (empty, or a copy of BENCH_STORE=DIR, such as
# one made by bench/make_store.py), wrk -t1 for BENCH_DURATION seconds (default 8)
# on 127.0.0.1. Prints req/s, latency percentiles and, for tallyd, the block device's bytes per
# request over the run (the whole device: other writers on the machine count too), and the CPU a
# request took in the process and in its writer thread (less swayed by the machine's other load than
# the rate; still larger per request when batches are smaller).
# SCENARIO is one of load.lua's: write, viral, feed, mixed, toggle.
# BENCH_ARGS_PREV / BENCH_ARGS_NEW: extra flags for the previous / new tallyd (e.g. the same build
# twice, BENCH_ARGS_NEW="--reaction-mode many", to compare the two modes).
# BENCH_POLICIES_PREV / BENCH_POLICIES_NEW: item policies PUT before the load (as admin), as
# TARGET=JSON;TARGET=JSON, e.g. BENCH_POLICIES_NEW='*={"kinds":["like","dislike"]};p*={"max_kinds":1}'
# (load.lua's items are p<N>). A build without policies cannot take them: set only the new one's.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: bench/compare.sh SCENARIO CONNS PREVIOUS_TALLYD NEW_TALLYD" >&2; exit 2; }
SCEN=$1 CONNS=$2 PREV=$3 NEW=$4
DUR=${BENCH_DURATION:-8}
for b in "$PREV" "$NEW"; do [ -x "$b" ] || { echo "$b is not an executable" >&2; exit 2; }; done
command -v wrk >/dev/null && command -v nginx >/dev/null || { echo "needs wrk and nginx (apt-get install wrk nginx)" >&2; exit 2; }
DEV=$(lsblk -no PKNAME "$(findmnt -no SOURCE -T /tmp)" 2>/dev/null | head -1)
[ -n "$DEV" ] || DEV=$(basename "$(findmnt -no SOURCE -T /tmp)")
sectors() { awk -v d="$DEV" '$3 == d {print $10}' /proc/diskstats; }
T=$(mktemp -d /tmp/tally-compare.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT

# one wrk run; prints "req/s p50 p99 p99.9" from load.lua's result line
measure() {
    local url=$1 target=$2 out=$3
    wrk -t1 -c"$CONNS" -d"${DUR}s" --latency --timeout 10s -s bench/load.lua "$url" -- "$SCEN" "$target" "$out" "$RANDOM" >"$out.wrk" 2>&1
    awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); r[kv[1]] = kv[2]}}
         END {printf "%8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms", r["rps"], r["p50_us"] / 1000, r["p99_us"] / 1000, r["p999_us"] / 1000}' "$out.result"
}

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

# the process's CPU (user + system) so far, µs; and its writer thread's (schedstat), µs
proc_cpu_us() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000000 / hz}' "/proc/$1/stat"; }
writer_cpu_us() {
    local t
    for t in /proc/"$1"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = tally-writer ] && { awk '{print $1 / 1000}' "$t/schedstat"; return; }
    done
    echo 0
}

run_tally() {
    local bin=$1 name=$2 extra=$3 policies=${4:-} d port pid s0 s1 line
    d=$(mktemp -d "$T/tally.XXXX")
    if [ -n "${BENCH_STORE:-}" ]; then cp -a "$BENCH_STORE" "$d/data" && sync; fi
    "$bin" --listen 127.0.0.1:0 --data "$d/data" --rate-limit off --read-rate-limit off $extra >"$d/out" 2>"$d/err" &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 100); do
        port=$(grep -o '127.0.0.1:[0-9]*' "$d/out" 2>/dev/null | head -1 | cut -d: -f2 || true)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { cat "$d/err" >&2; echo "$name did not start" >&2; exit 1; }
    # a build with a row filter fills it from the rows after starting: measure once it is in use
    for _ in $(seq 1 600); do
        curl -s "http://127.0.0.1:$port/metrics" | grep -q '^tally_row_filter_ready 0' || break
        sleep 0.1
    done
    [ -z "$policies" ] || put_policies "$port" "$policies" || exit 1
    s0=$(sectors) c0=$(proc_cpu_us "$pid") w0=$(writer_cpu_us "$pid")
    line=$(measure "http://127.0.0.1:$port" tally "$d/r")
    s1=$(sectors) c1=$(proc_cpu_us "$pid") w1=$(writer_cpu_us "$pid")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    local n
    n=$(awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); if (kv[1] == "requests") print kv[2]}}' "$d/r.result")
    n=${n:-1}
    [ "$n" -gt 0 ] || n=1
    printf '%-16s %s  device %5.1f KB/req  cpu %6.1f us/req  writer %5.1f us/req\n' "$name" "$line" \
        "$(awk -v s=$((s1 - s0)) -v n="$n" 'BEGIN {print s * 512 / 1024 / n}')" \
        "$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN {print (b - a) / n}')" \
        "$(awk -v a="$w0" -v b="$w1" -v n="$n" 'BEGIN {print (b - a) / n}')"
    rm -rf "$d"
}

run_nginx() {
    local d=$T/nginx
    mkdir -p "$d"
    cat >"$d/nginx.conf" <<NG
worker_processes 1; pid $d/nginx.pid; error_log $d/error.log; daemon on;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:18089; location / { default_type application/json; return 200 '{"item":"x","counts":{"like":1,"dislike":0}}'; } } }
NG
    nginx -c "$d/nginx.conf" -p "$d"
    sleep 0.3
    printf '%-16s %s\n' "nginx (static)" "$(measure http://127.0.0.1:18089 nginx "$d/r")"
    kill "$(cat "$d/nginx.pid")"
}

echo "bench/compare.sh $SCEN $CONNS: $(date -u +%FT%TZ), wrk -t1 -c$CONNS -d${DUR}s, device $DEV${BENCH_STORE:+, store copied from $BENCH_STORE}"
[ -z "${BENCH_POLICIES_PREV:-}${BENCH_POLICIES_NEW:-}" ] ||
    echo "policies: previous build '${BENCH_POLICIES_PREV:-}', this build '${BENCH_POLICIES_NEW:-}'"
run_tally "$PREV" "previous build" "${BENCH_ARGS_PREV:-}" "${BENCH_POLICIES_PREV:-}"
run_tally "$NEW" "this build" "${BENCH_ARGS_NEW:-}" "${BENCH_POLICIES_NEW:-}"
run_nginx
run_tally "$PREV" "previous build" "${BENCH_ARGS_PREV:-}" "${BENCH_POLICIES_PREV:-}"
run_tally "$NEW" "this build" "${BENCH_ARGS_NEW:-}" "${BENCH_POLICIES_NEW:-}"
