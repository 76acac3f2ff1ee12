#!/usr/bin/env bash
# bench/run.sh — the benchmark harness. Not part of the test suite; never run by CI.
#
# Starts a fresh tallyd on an empty temporary data directory and an nginx instance of its own
# (one worker, a fixed JSON answer: the ceiling), both on 127.0.0.1 only, and runs wrk against
# each with the same settings:
#   (a) write   durable PUTs; users uniform over 1M, items Zipf(1.1) over 1M; like/dislike/none 80/15/5
#   (b) viral   the same PUT (like only), every write on one item
#   (c) feed    GET /v1/items?ids=<100 ids> with a viewer
#   (d) mixed   90% GET /v1/items/{item} with a viewer, 10% writes as in (a)
#   (e) toggle  POST .../reaction:toggle with Idempotency-Key; 20% resend an earlier key and body
# Then, with tallyd alone, a short write run under `strace -c` (fdatasyncs per request; slows
# the server, so its figures are not in the table), the correctness check (bench/verify.py:
# every row written is read back through the API and compared with the counts), and a SIGTERM
# shutdown that must exit 0.
#
# Bounded: every wrk run has a fixed duration (default total about 4 minutes); every wait loop
# has a count limit. Environment knobs:
#   BENCH_DURATION=10        seconds of each main run (tally and nginx alike)
#   BENCH_SWEEP_DURATION=6   seconds of each extra connection-count run
#   BENCH_WRK_THREADS=1      wrk threads (the machine has 2 cores: one for wrk, the rest for the server)
#   BENCH_VERIFY_BUDGET=60   seconds at most for the correctness check
#   BENCH_WAIT_QUIET=0       seconds to wait (at most) for other work on the machine to stop first
#   BENCH_NICE=-10           run tallyd, nginx, wrk and the check at this nice value (root only for < 0):
#                            on a shared machine, the benchmark's processes then win the CPU over other work
#   BENCH_KEEP=1             keep the temporary directory (wrk outputs, logs, the data directory)
#   TALLYD=build/tallyd      the server binary
#   BENCH_TALLYD_FLAGS=...   extra tallyd flags (e.g. "--batch-max 256")
# Output: the report (Markdown) on stdout, progress on stderr; with BENCH_OUT=DIR also DIR/report.md.
set -euo pipefail
{ # The whole script is parsed before it runs, so editing this file during a run changes nothing.

cd "$(dirname "$0")/.."
BENCH_DIR=bench
TALLYD=${TALLYD:-build/tallyd}
DUR=${BENCH_DURATION:-10}
SWEEP_DUR=${BENCH_SWEEP_DURATION:-6}
WRK_THREADS=${BENCH_WRK_THREADS:-1}
VERIFY_BUDGET=${BENCH_VERIFY_BUDGET:-60}
SEED=${BENCH_SEED:-$(date +%s)}

# the command line as given, for the report
CMDLINE=""
for v in BENCH_DURATION BENCH_SWEEP_DURATION BENCH_WRK_THREADS BENCH_VERIFY_BUDGET BENCH_NICE BENCH_WAIT_QUIET BENCH_SEED TALLYD; do
    if [ -n "${!v:-}" ]; then CMDLINE="$CMDLINE$v=${!v} "; fi
done
CMDLINE="${CMDLINE}bench/run.sh"

NICE_CMD=()
if [ -n "${BENCH_NICE:-}" ]; then NICE_CMD=(nice -n "$BENCH_NICE"); fi

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- tools

# Debian packages: wrk, nginx and python3 are needed; strace only for the fsync count.
# (Installing nginx does not start anything here; this script runs an nginx of its own.)
need_pkgs=()
command -v wrk >/dev/null 2>&1 || need_pkgs+=(wrk)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need_pkgs+=(nginx)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
if [ ${#need_pkgs[@]} -gt 0 ] || ! command -v strace >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq || true
        if [ ${#need_pkgs[@]} -gt 0 ]; then
            log "installing ${need_pkgs[*]}"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
        fi
        command -v strace >/dev/null 2>&1 ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends strace >/dev/null ||
            log "strace could not be installed: no fsync count"
    elif [ ${#need_pkgs[@]} -gt 0 ]; then
        die "missing ${need_pkgs[*]}: install them (apt-get install ${need_pkgs[*]})"
    fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$TALLYD" ] || die "$TALLYD not built (make all)"
# which source the binary came from: the git work tree it was built in, if any
tdir=$(dirname "$TALLYD")
if commit=$(git -C "$tdir" rev-parse --short HEAD 2>/dev/null); then
    TALLYD_BUILT="built in a work tree at commit $commit"
    git -C "$tdir" diff --quiet HEAD -- src 2>/dev/null || TALLYD_BUILT="$TALLYD_BUILT, with uncommitted changes in src/"
else
    TALLYD_BUILT="not in a git work tree"
fi

# ---------------------------------------------------------------- temp dir and cleanup

T=$(mktemp -d "${TMPDIR:-/tmp}/tally-bench.XXXXXX")
OUT=${BENCH_OUT:-$T}
mkdir -p "$T/runs" "$T/nginx" "$OUT"
TALLYD_PID="" NGINX_PID="" BG_PID="" WRK_PID="" VERIFY_PID=""

cleanup() {
    set +e
    [ -n "$WRK_PID" ] && kill "$WRK_PID" 2>/dev/null
    [ -n "$VERIFY_PID" ] && kill "$VERIFY_PID" 2>/dev/null
    [ -n "$BG_PID" ] && kill "$BG_PID" 2>/dev/null
    [ -n "$TALLYD_PID" ] && kill -TERM "$TALLYD_PID" 2>/dev/null
    [ -n "$NGINX_PID" ] && kill -TERM "$NGINX_PID" 2>/dev/null
    for _ in $(seq 1 50); do
        { [ -n "$TALLYD_PID" ] && kill -0 "$TALLYD_PID" 2>/dev/null; } ||
            { [ -n "$NGINX_PID" ] && kill -0 "$NGINX_PID" 2>/dev/null; } || break
        sleep 0.1
    done
    [ -n "$TALLYD_PID" ] && kill -KILL "$TALLYD_PID" 2>/dev/null
    [ -n "$NGINX_PID" ] && kill -KILL "$NGINX_PID" 2>/dev/null
    if [ "${BENCH_KEEP:-0}" = 1 ]; then log "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- servers

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_tallyd() {
    local extra=()
    # Benchmark the server, not the per-user limiter (when it exists): users here are random.
    # (and not the per-address limit on reads without a user: every request here comes from 127.0.0.1)
    local help
    help=$("$TALLYD" --help 2>&1 || true)
    if grep -q -- '--rate-limit' <<<"$help"; then extra+=(--rate-limit off); fi
    if grep -q -- '--read-rate-limit' <<<"$help"; then extra+=(--read-rate-limit off); fi
    # shellcheck disable=SC2206
    extra+=(${BENCH_TALLYD_FLAGS:-})
    # A copy under a name of its own: on a shared machine a `pkill tallyd` elsewhere (seen while this
    # harness was written) would otherwise end the benchmark's server in the middle of a run.
    cp "$TALLYD" "$T/bench-server"
    "${NICE_CMD[@]}" "$T/bench-server" --listen 127.0.0.1:0 --data "$T/data" "${extra[@]}" >"$T/tallyd.out" 2>"$T/tallyd.err" &
    TALLYD_PID=$!
    TALLYD_PID_RUN=$TALLYD_PID
    for _ in $(seq 1 100); do
        TALLY_URL=$(grep -o 'http://[0-9.:]*' "$T/tallyd.out" 2>/dev/null | head -1 || true)
        [ -n "$TALLY_URL" ] && break
        kill -0 "$TALLYD_PID" 2>/dev/null || { cat "$T/tallyd.err" >&2; die "tallyd did not start"; }
        sleep 0.1
    done
    [ -n "$TALLY_URL" ] || die "tallyd printed no listening line in 10 s"
    TALLYD_ARGS="--listen 127.0.0.1:0 --data \$TMP/data ${extra[*]}"
    log "tallyd pid $TALLYD_PID at $TALLY_URL"
}

start_nginx() {
    local port
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        cat >"$T/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $T/nginx/body;
    proxy_temp_path $T/nginx/proxy;
    fastcgi_temp_path $T/nginx/fastcgi;
    uwsgi_temp_path $T/nginx/uwsgi;
    scgi_temp_path $T/nginx/scgi;
    server {
        listen 127.0.0.1:$port;
        location / {
            default_type application/json;
            return 200 '{"item":"x","counts":{"like":1,"dislike":0}}';
        }
    }
}
EOF
        "${NICE_CMD[@]}" "$NGINX" -e "$T/nginx/error.log" -p "$T/nginx" -c "$T/nginx/nginx.conf" >"$T/nginx/stdout" 2>&1 &
        NGINX_PID=$!
        for _ in $(seq 1 50); do
            if curl -sf -o /dev/null "http://127.0.0.1:$port/"; then
                NGINX_URL="http://127.0.0.1:$port"
                log "nginx pid $NGINX_PID at $NGINX_URL ($("$NGINX" -v 2>&1 | sed 's/.*: //'))"
                return 0
            fi
            kill -0 "$NGINX_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$NGINX_PID" 2>/dev/null || true
        wait "$NGINX_PID" 2>/dev/null || true
        NGINX_PID=""
    done
    cat "$T/nginx/error.log" >&2 || true
    die "nginx did not start"
}

# ---------------------------------------------------------------- measurements

CLK_TCK=$(getconf CLK_TCK)
DISK_STAT=""
dev=$(df --output=source "$T" 2>/dev/null | tail -1 || true)
if [ -n "$dev" ] && [ -e "/sys/class/block/$(basename "$dev")/stat" ]; then
    DISK_STAT="/sys/class/block/$(basename "$dev")/stat"
fi

proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# "tid cpu_ticks write_bytes" for each of tallyd's threads (the writer is the one that writes the file)
tasks() {
    local t
    for t in /proc/"$1"/task/*; do
        echo "$(basename "$t") $(proc_ticks "$1/task/$(basename "$t")") $(awk '/^write_bytes/{print $2}' "$t/io" 2>/dev/null || echo 0)"
    done
}
cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
disk() { if [ -n "$DISK_STAT" ]; then awk '{print $7, $16}' "$DISK_STAT"; else echo "0 0"; fi; }
pio() { awk '/^write_bytes/{print $2}' "/proc/$1/io" 2>/dev/null || echo 0; }
metrics() { curl -s -m 2 "$TALLY_URL/metrics" 2>/dev/null | grep -v '^#' || true; }

# run_wrk LABEL TARGET SCENARIO CONNS DURATION SEED [RATE]
run_wrk() {
    local label=$1 target=$2 scenario=$3 conns=$4 dur=$5 seed=$6 rate=${7:-} url pid out
    if [ "$target" = tally ]; then url=$TALLY_URL pid=$TALLYD_PID; else url=$NGINX_URL pid=$(pgrep -P "$NGINX_PID" | head -1); fi
    out="$T/runs/$label-$target"
    local c0 b0 a0 d0 f0 io0 c1 b1 a1 d1 f1 io1 t_start t_end
    if [ "$target" = tally ]; then
        tasks "$pid" >"$out.tasks0"
        metrics >"$out.metrics0"
        # pipeline lag, sampled twice a second while the load runs
        (for _ in $(seq 1 $((dur * 2))); do
            sleep 0.5
            curl -s -m 1 "$TALLY_URL/metrics" 2>/dev/null | awk '/^tally_pipeline_lag_seconds /{print $2}' || true
        done >"$out.lag") &
        BG_PID=$!
    fi
    c0=$(proc_ticks "$pid"); read -r b0 a0 < <(cpu_busy); read -r d0 f0 < <(disk); io0=$(pio "$pid")
    log "$label on $target: wrk -t$WRK_THREADS -c$conns -d${dur}s ($scenario)"
    t_start=$(date +%s.%N)
    TIMEFORMAT='%R %U %S'
    # in the background, so that a signal to this script is handled at once (the trap ends wrk)
    "${NICE_CMD[@]}" wrk -t"$WRK_THREADS" -c"$conns" -d"${dur}s" --latency --timeout 10s \
        -s "$BENCH_DIR/load.lua" "$url" -- "$scenario" "$target" "$out" "$seed" $rate >"$out.wrk" 2>&1 &
    WRK_PID=$!
    { time wait "$WRK_PID"; } 2>"$out.time" || true
    WRK_PID=""
    t_end=$(date +%s.%N)
    c1=$(proc_ticks "$pid"); read -r b1 a1 < <(cpu_busy); read -r d1 f1 < <(disk); io1=$(pio "$pid")
    if [ "$target" = tally ]; then
        tasks "$pid" >"$out.tasks1"
        metrics >"$out.metrics1"
        wait "$BG_PID" 2>/dev/null || true
        BG_PID=""
    fi
    [ -s "$out.result" ] || { cat "$out.wrk" >&2; die "wrk gave no result for $label on $target"; }
    # label target scenario conns dur wall server_ticks cpu_busy cpu_all disk_sectors disk_flushes
    # proc_write_bytes wrk_time(real user sys)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$label" "$target" "$scenario" "$conns" "$dur" \
        "$(awk -v a="$t_start" -v b="$t_end" 'BEGIN{printf "%.2f", b-a}')" "$((c1 - c0))" \
        "$((b1 - b0))" "$((a1 - a0))" "$((d1 - d0))" "$((f1 - f0))" "$((io1 - io0))" \
        "$(tr '\n' ' ' <"$out.time")" >>"$T/runs.tsv"
    if [ "$target" = tally ] && ! kill -0 "$TALLYD_PID" 2>/dev/null; then
        tail -20 "$T/tallyd.err" >&2
        die "tallyd is gone after $label"
    fi
}

# ---------------------------------------------------------------- the runs

# CPU the rest of the machine uses (in % of one core) over 2 s: the benchmark needs the machine to itself
busy_now() {
    local b0 a0 b1 a1
    read -r b0 a0 < <(cpu_busy); sleep 2; read -r b1 a1 < <(cpu_busy)
    echo $(((b1 - b0) * 100 * $(nproc) / (a1 - a0 > 0 ? a1 - a0 : 1)))
}
BUSY=$(busy_now)
if [ "${BENCH_WAIT_QUIET:-0}" -gt 0 ] && [ "$BUSY" -gt 25 ]; then
    log "the machine is busy (${BUSY}% CPU); waiting up to ${BENCH_WAIT_QUIET}s for it to quiet down"
    for _ in $(seq 1 $((BENCH_WAIT_QUIET / 2))); do
        BUSY=$(busy_now)
        [ "$BUSY" -le 25 ] && break
    done
fi
log "seed $SEED; temp dir $T; machine: $(nproc) CPUs; busy before the runs: ${BUSY}% CPU; load average $(cut -d' ' -f1-3 /proc/loadavg)"
start_tallyd
start_nginx
BEFORE_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# label scenario connections duration
RUNS="
a-c64 write 64 $DUR
a-c16 write 16 $SWEEP_DUR
a-c256 write 256 $DUR
a-c512 write 512 $SWEEP_DUR
b-c64 viral 64 $DUR
b-c256 viral 256 $SWEEP_DUR
c-c32 feed 32 $DUR
d-c64 mixed 64 $DUR
e-c64 toggle 64 $DUR
e-c256 toggle 256 $SWEEP_DUR
"
: >"$T/runs.tsv"
n=0
while read -r label scenario conns dur; do
    [ -n "$label" ] || continue
    n=$((n + 1))
    # a seed of its own for each run: every run writes new (item, user) pairs, not the last run's again
    run_wrk "$label" tally "$scenario" "$conns" "$dur" $((SEED + 1000 * n))
    run_wrk "$label" nginx "$scenario" "$conns" "$dur" $((SEED + 1000 * n))
done <<<"$RUNS"

# Write latency at half the best (a) rate of this run: the same writes, paced (an open-loop client
# at a set rate rather than connections that send again as soon as they are answered).
BEST_A=$(awk -F'\t' '$2 == "tally" && $3 == "write" {print $1}' "$T/runs.tsv" | while read -r label; do
    sed -n 's/.*rps=\([0-9.]*\).*/\1/p' "$T/runs/$label-tally.result"; done | sort -n | tail -1)
HALF_RATE=$(awk -v r="${BEST_A:-0}" -v t="$WRK_THREADS" 'BEGIN { printf "%d", r / 2 / t }')
if [ "$HALF_RATE" -gt 0 ]; then
    n=$((n + 1))
    log "paced writes: $((HALF_RATE * WRK_THREADS))/s, half the best (a) rate ($BEST_A/s)"
    run_wrk a-half tally paced 64 "$DUR" $((SEED + 1000 * n)) "$HALF_RATE"
    run_wrk a-half nginx paced 64 "$DUR" $((SEED + 1000 * n)) "$HALF_RATE"
fi

# fdatasyncs per request: a short write run with strace attached (slows tallyd a lot; not in the table)
STRACE_NOTE="strace not run"
if command -v strace >/dev/null 2>&1; then
    log "strace -c -f on tallyd during a 4 s write run (-c64)"
    strace -c -f -e trace=fdatasync,fsync,msync,sync_file_range,pwrite64,pwritev,writev -o "$T/strace.txt" -p "$TALLYD_PID" 2>/dev/null &
    BG_PID=$!
    sleep 0.5
    "${NICE_CMD[@]}" wrk -t"$WRK_THREADS" -c64 -d4s --timeout 10s -s "$BENCH_DIR/load.lua" "$TALLY_URL" -- write tally "$T/runs/strace-tally" $((SEED + 999)) >"$T/runs/strace-tally.wrk" 2>&1 &
    WRK_PID=$!
    wait "$WRK_PID" || true
    WRK_PID=""
    kill -INT "$BG_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$BG_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$BG_PID" 2>/dev/null || true
    BG_PID=""
    if [ -s "$T/strace.txt" ] && [ -s "$T/runs/strace-tally.result" ]; then
        STRACE_NOTE=$(python3 - "$T/strace.txt" "$T/runs/strace-tally.result" <<'EOF'
import sys
calls = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[-1].isidentifier() and f[3].isdigit():
        calls[f[-1]] = (int(f[3]), float(f[2]))
res = dict(kv.split("=", 1) for kv in open(sys.argv[2]).read().split())
n, secs = int(res["requests"]), float(res["secs"])
syncs = sum(calls.get(k, (0, 0))[0] for k in ("fdatasync", "fsync", "msync", "sync_file_range"))
pw = calls.get("pwrite64", (0, 0))[0] + calls.get("pwritev", (0, 0))[0]
us = calls.get("fdatasync", (0, 0))[1]
print(f"under strace: {n} writes in {secs:.1f} s ({n/secs:.0f}/s), {syncs} syncs "
      f"({syncs/secs:.0f}/s, {n/max(syncs,1):.1f} writes per sync, {us:.0f} us per fdatasync as strace sees it), "
      f"{pw} pwrite calls ({pw/max(n,1):.2f} per write)")
EOF
)
    fi
    cp "$T/strace.txt" "$OUT/strace.txt" 2>/dev/null || true
    log "$STRACE_NOTE"
fi

# ---------------------------------------------------------------- correctness check

sleep 1
log "correctness check (budget ${VERIFY_BUDGET}s)"
changed_true=0
for f in "$T"/runs/b-*-tally.result; do
    n=$(grep -o 'changed_true=[0-9]*' "$f" | cut -d= -f2)
    changed_true=$((changed_true + n))
done
VERIFY_RC=0
timeout $((VERIFY_BUDGET + 60)) "${NICE_CMD[@]}" python3 "$BENCH_DIR/verify.py" --url "$TALLY_URL" --budget "$VERIFY_BUDGET" \
    --viral-changed-true "$changed_true" --pairs "$T"/runs/*-tally.pairs >"$T/verify.txt" 2>&1 &
VERIFY_PID=$!
wait "$VERIFY_PID" || VERIFY_RC=$?
VERIFY_PID=""
cat "$T/verify.txt" >&2

# ---------------------------------------------------------------- shutdown

log "SIGTERM to tallyd"
kill -TERM "$TALLYD_PID"
t0=$(date +%s.%N)
for _ in $(seq 1 150); do kill -0 "$TALLYD_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$TALLYD_PID" 2>/dev/null; then
    SHUTDOWN="tallyd still running 15 s after SIGTERM"
else
    rc=0; wait "$TALLYD_PID" || rc=$?
    SHUTDOWN="tallyd exited with status $rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s after SIGTERM"
    TALLYD_PID=""
fi
log "$SHUTDOWN"
DATA_SIZE=$(du -sh "$T/data" | cut -f1)

# ---------------------------------------------------------------- report

python3 "$BENCH_DIR/report.py" "$T/runs.tsv" "$T/runs" "$CLK_TCK" "$TALLYD_PID_RUN" >"$OUT/tables.md"
{
    echo "## Run"
    echo
    echo "- command: \`$CMDLINE\` (wrk -t$WRK_THREADS, --latency, --timeout 10s; main runs ${DUR}s, extra connection counts ${SWEEP_DUR}s; seed $SEED)"
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs, $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
    echo "- tallyd: \`$TALLYD $TALLYD_ARGS\` ($TALLYD_BUILT)"
    echo "- nginx: $("$NGINX" -v 2>&1 | sed 's/.*: //'), 1 worker, fixed 200 JSON answer, access_log off"
    echo "- $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-3)"
    echo "- CPU busy on the machine just before the runs (other work): ${BUSY}% of one core; load average before: $BEFORE_LOAD; after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- data directory after the runs: $DATA_SIZE"
    echo
    cat "$OUT/tables.md"
    echo
    echo "## fsync"
    echo
    echo "- $STRACE_NOTE"
    echo
    echo "## Correctness check"
    echo
    echo '```'
    cat "$T/verify.txt"
    echo '```'
    echo
    echo "## Shutdown"
    echo
    echo "- $SHUTDOWN"
    if grep -qv 'development-mode\|event=shutdown' "$T/tallyd.err"; then
        echo "- tallyd stderr (other than the development-mode warning):"
        echo '```'
        grep -v 'development-mode' "$T/tallyd.err" | tail -20
        echo '```'
    fi
} | tee "$OUT/report.md"

if [ "$VERIFY_RC" != 0 ]; then die "correctness check failed (see above)"; fi
exit 0
}
