#!/bin/bash
# bench/recount_pg.sh — how long a whole-store recount (POST /v1/admin/recount) takes on PostgreSQL,
# one database and two shards, for one build or two side by side. Not part of the test suite.
#
#   bench/recount_pg.sh [RECORDS] [TALLYD] [OTHER_TALLYD]     (from the project root, as root)
#
# One throwaway PostgreSQL (tests/pg/pgcluster.py, fsync off) with three databases: A gets
# bench/make_store.py's store of RECORDS reactions (default 200000) through `tally move`; B and C
# become two shards of one cluster through POST /v1/admin/import of that store's export. Then each
# build recounts A, then B+C, twice, alternating; the figures are the answers' wall-clock times.
set -u
cd "$(dirname "$0")/.."
records=${1:-200000}
builds=("${2:-build/tallyd}")
[ $# -ge 3 ] && builds+=("$3")
work=$(mktemp -d /tmp/tally-recount.XXXXXX)
port=18411
secret=recount-bench-secret-recount-bench-secret
/usr/bin/python3 - "$work" <<'PY' &
import os, signal, sys, time
sys.path.insert(0, "tests/pg")
import pgcluster
work = sys.argv[1]
c = pgcluster.start_primary("recount", settings={"shared_buffers": "1GB"})
for db in ("a", "b", "c"):
    pgcluster.create_database(c, db)
with open(os.path.join(work, "uris.tmp"), "w") as f:
    f.write(" ".join(c.uri(db) for db in ("a", "b", "c")) + "\n")
os.rename(os.path.join(work, "uris.tmp"), os.path.join(work, "uris"))
signal.signal(signal.SIGTERM, lambda *_: (c.destroy(), sys.exit(0)))
while time.sleep(1) is None:
    pass
PY
pg_pid=$!
cleanup() {
    [ -n "${node:-}" ] && kill "$node" 2>/dev/null && wait "$node" 2>/dev/null
    kill "$pg_pid" 2>/dev/null && wait "$pg_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 120); do [ -f "$work/uris" ] && break; sleep 0.5; done
read -r A B C <"$work/uris" || { echo "PostgreSQL did not start" >&2; exit 1; }

start() { # tallyd BUILD STORE...
    local bin=$1 args=()
    shift
    for s in "$@"; do args+=(--store "$s"); done
    TALLY_JWT_SECRET=$secret "$bin" "${args[@]}" --listen 127.0.0.1:$port --import-max-size 256MiB \
        --recount-interval 0 >"$work/tallyd.log" 2>&1 &
    node=$!
    for _ in $(seq 150); do curl -sf 127.0.0.1:$port/readyz >/dev/null && return 0; sleep 0.2; done
    echo "tallyd did not start" >&2
    exit 1
}
stop() { kill "$node" && wait "$node"; node=; }
admin() { # PATH [curl args]
    local path=$1
    shift
    curl -sS -m 1800 -X POST -H "Authorization: Bearer $(TALLY_JWT_SECRET=$secret build/tally token --user admin --admin)" \
        "$@" "127.0.0.1:$port$path"
}

python3 bench/make_store.py "$records" "$work/emb" >/dev/null
build/tally move --data "$work/emb" --store "$A" >/dev/null 2>&1
build/tally export --data "$work/emb" >"$work/all.ndjson"
start "${builds[0]}" "$B" "$C"
admin /v1/admin/import -H "Content-Type: application/x-ndjson" --data-binary @"$work/all.ndjson" >/dev/null
sleep 10 # the users' lists folded across the shards
stop
for round in 1 2; do
    for bin in "${builds[@]}"; do
        for stores in "$A" "$B $C"; do
            # shellcheck disable=SC2086
            start "$bin" $stores
            t0=$(date +%s.%N)
            answer=$(admin /v1/admin/recount)
            t1=$(date +%s.%N)
            stop
            printf 'round %d  %-28s %-10s %6.2f s  %s\n' "$round" "$bin" "$([ "$stores" = "$A" ] && echo one-db || echo two-shards)" \
                "$(echo "$t1 - $t0" | bc)" "$answer"
        done
    done
done
