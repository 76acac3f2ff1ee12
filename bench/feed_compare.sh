#!/bin/bash
# Feed pages (100 ids, a viewer) with wrk: the previous build, this build and nginx, same run.
set -u
# usage: bench/feed_compare.sh PREVIOUS_TALLYD NEW_TALLYD   (needs wrk, nginx, curl; 127.0.0.1 only, ~45 s)
PREV=$1 NEW=$2
FEED=$(mktemp)
python3 -c "import sys; ids=','.join('it%d' % i for i in range(100)); open(sys.argv[1], 'w').write('wrk.headers[\"X-User-Id\"]=\"u1\"\nwrk.path=\"/v1/items?ids=%s\"\n' % ids)" "$FEED"
run_tally() {
  local bin=$1 d=$(mktemp -d)
  $bin --listen 127.0.0.1:0 --data $d --rate-limit off --read-rate-limit off > $d/out 2>/dev/null &
  local pid=$!; sleep 0.5; local P=$(grep -o '[0-9]*$' $d/out)
  for i in $(seq 1 100); do curl -s -X PUT -H "X-User-Id: u$i" localhost:$P/v1/items/it$i/like > /dev/null; done
  echo "$2: $(wrk -t1 -c32 -d8s -s $FEED http://127.0.0.1:$P/ 2>&1 | grep -E 'Requests/sec|Non-2xx' | tr '\n' ' ')"
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
}
run_nginx() {
  local d=$(mktemp -d)
  cat > $d/nginx.conf <<NG
worker_processes 1; pid $d/nginx.pid; error_log $d/error.log; daemon on;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:18089; location / { default_type application/json; return 200 '{"item":"x","counts":{"like":1,"dislike":0}}'; } } }
NG
  nginx -c $d/nginx.conf -p $d
  sleep 0.3
  echo "nginx (static 44 B): $(wrk -t1 -c32 -d8s -s $FEED http://127.0.0.1:18089/ 2>&1 | grep -E 'Requests/sec' | tr '\n' ' ')"
  kill $(cat $d/nginx.pid); rm -rf $d
}
run_tally "$PREV" "previous build"
run_tally "$NEW" "this build"
run_nginx
run_tally "$PREV" "previous build"
run_tally "$NEW" "this build"
