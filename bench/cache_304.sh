#!/usr/bin/env bash
# bench/cache_304.sh — 304 answers to If-None-Match on a public batch read (GET /v1/items?ids=, no
# user) against a static nginx answering 304 for a file with its ETag, in the same run. Not a test.
#
#   bench/cache_304.sh [TALLYD]        (BENCH_DURATION=10 BENCH_CONNECTIONS=64 BENCH_IDS=20)
#
# A fresh tallyd (embedded store, rate limits off) gets one reaction on each of BENCH_IDS items; the
# batch read of those ids is asked once for its weak ETag, and nginx (one worker, access_log off)
# serves the very same body as a static file (its own ETag). Each is then driven by the same wrk
# command (-t1, BENCH_CONNECTIONS connections, BENCH_DURATION s) with If-None-Match naming its ETag,
# alternated twice (tally, nginx, tally, nginx); every answer is checked to be a 304 first. Prints
# each run's req/s, and the ratio of the best tally run to the best nginx run. Everything on
# 127.0.0.1; every process started here is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."
TALLYD=${1:-${TALLYD:-build/tallyd}}
DUR=${BENCH_DURATION:-10}
CONNS=${BENCH_CONNECTIONS:-64}
NIDS=${BENCH_IDS:-20}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install wrk)" >&2; exit 1; }
[ -x "$NGINX" ] || { echo "nginx is missing (apt-get install nginx)" >&2; exit 1; }
[ -x "$TALLYD" ] || { echo "$TALLYD not built (make all)" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/tally-304.XXXXXX")
TALLYD_PID="" NGINX_PID=""
cleanup() {
    set +e
    [ -n "$TALLYD_PID" ] && kill -TERM "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null
    [ -n "$NGINX_PID" ] && kill -TERM "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
    [ "${BENCH_KEEP:-0}" = 1 ] && echo "kept $T" >&2 || rm -rf "$T"
}
trap cleanup EXIT

"$TALLYD" --listen 127.0.0.1:0 --data "$T/data" --rate-limit off --read-rate-limit off >"$T/tallyd.out" 2>"$T/tallyd.err" &
TALLYD_PID=$!
for _ in $(seq 1 100); do
    TALLY_URL=$(grep -o 'http://[0-9.:]*' "$T/tallyd.out" 2>/dev/null | head -1 || true)
    [ -n "$TALLY_URL" ] && break
    sleep 0.1
done
[ -n "$TALLY_URL" ] || { cat "$T/tallyd.err" >&2; exit 1; }

ids=""
for i in $(seq 1 "$NIDS"); do
    curl -sf -o /dev/null -X PUT -H 'X-User-Id: bench' -H 'Content-Type: application/json' \
        --data '{"reaction":"like"}' "$TALLY_URL/v1/items/hot-$i/reaction"
    ids="$ids${ids:+,}hot-$i"
done
sleep 0.5 # the fold
TALLY_PATH="/v1/items?ids=$ids"
curl -sf -D "$T/tally.head" -o "$T/body.json" "$TALLY_URL$TALLY_PATH"
TALLY_ETAG=$(grep -i '^etag:' "$T/tally.head" | sed 's/^[^:]*: *//; s/\r$//')

mkdir -p "$T/nginx/www"
cp "$T/body.json" "$T/nginx/www/items.json"
chmod a+rx "$T" "$T/nginx" "$T/nginx/www" && chmod a+r "$T/nginx/www/items.json" # nginx's worker may not be us
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$T/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $T/nginx/body;
    proxy_temp_path $T/nginx/proxy;
    fastcgi_temp_path $T/nginx/fastcgi;
    uwsgi_temp_path $T/nginx/uwsgi;
    scgi_temp_path $T/nginx/scgi;
    server {
        listen 127.0.0.1:$PORT;
        root $T/nginx/www;
        location / { default_type application/json; etag on; }
    }
}
EOF
"$NGINX" -e "$T/nginx/error.log" -p "$T/nginx" -c "$T/nginx/nginx.conf" >"$T/nginx/stdout" 2>&1 &
NGINX_PID=$!
NGINX_URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 50); do curl -sf -o /dev/null "$NGINX_URL/items.json" && break; sleep 0.1; done
curl -sf -D "$T/nginx.head" -o /dev/null "$NGINX_URL/items.json"
NGINX_ETAG=$(grep -i '^etag:' "$T/nginx.head" | sed 's/^[^:]*: *//; s/\r$//')

for pair in "tally $TALLY_URL$TALLY_PATH $TALLY_ETAG" "nginx $NGINX_URL/items.json $NGINX_ETAG"; do
    read -r name url etag <<<"$pair"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $etag" "$url")
    [ "$code" = 304 ] || { echo "$name answered $code, not 304, to If-None-Match: $etag" >&2; exit 1; }
done
echo "body: $(wc -c <"$T/body.json") bytes, $NIDS ids; tally ETag $TALLY_ETAG; nginx ETag $NGINX_ETAG"
echo "wrk -t1 -c$CONNS -d${DUR}s -H 'If-None-Match: <etag>' <url>; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

best_tally=0 best_nginx=0
run() { # name url etag
    local out rps non
    out=$(wrk -t1 -c"$CONNS" -d"${DUR}s" -H "If-None-Match: $3" "$2")
    rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    non=$(awk '/Non-2xx or 3xx/ {print $5}' <<<"$out")
    echo "$1: $rps req/s${non:+ ($non answers not 2xx/3xx)}"
    if [ "$1" = tally ]; then
        best_tally=$(python3 -c "print(max($best_tally, $rps))")
    else
        best_nginx=$(python3 -c "print(max($best_nginx, $rps))")
    fi
}
for _ in 1 2; do
    run tally "$TALLY_URL$TALLY_PATH" "$TALLY_ETAG"
    run nginx "$NGINX_URL/items.json" "$NGINX_ETAG"
done
python3 -c "print('best tally / best nginx: %.2f (tally %.0f, nginx %.0f req/s)' % ($best_tally / $best_nginx, $best_tally, $best_nginx))"
