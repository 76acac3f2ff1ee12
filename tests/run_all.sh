#!/usr/bin/env bash
# run_all.sh — the whole suite: unit tests (ASan+UBSan), then the end-to-end suite against the
# release build and against the sanitizer build, then against the release build on PostgreSQL
# (TALLY_STORE=pg: the tests start their own throwaway PostgreSQL 15 cluster, tests/pg/pgcluster.py),
# the seam test on PostgreSQL first, and on two shards (stage e2e-pg-shards); then failovers under
# Patroni (stage patroni).
# Ends with one line: "N passed, N failed". Each stage's wall time is printed after it.
set -u
cd "$(dirname "$0")/.."
passed=0
failed=0
log_dir=$(mktemp -d /tmp/tally-test-XXXXXX)

# Runs one stage, shows its output, and adds its "N passed, N failed" line to the totals. A stage
# that exits non-zero without such a line counts as one failure.
stage() {
    local name=$1
    shift
    echo "=== $name"
    local t0=$SECONDS
    "$@" 2>&1 | tee "$log_dir/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: $((SECONDS - t0))s"
    account "$name" "$rc"
}

# Adds a finished stage's "N passed, N failed" line (from its log) to the totals.
account() {
    local name=$1 rc=$2 line
    line=$(grep -E '^([a-z0-9_-]+: )?[0-9]+ passed, [0-9]+ failed' "$log_dir/$name.log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "$name: no result line (exit status $rc)"
        failed=$((failed + 1))
        return
    fi
    local p f
    p=$(echo "$line" | sed -E 's/^([a-z0-9_-]+: )?([0-9]+) passed.*/\2/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$name: exit status $rc"
        failed=$((failed + 1))
    fi
}

# A stage that mostly waits (a clock running out), run beside the others: started here, its output
# shown and counted by background_wait.
background_start() {
    local name=$1
    shift
    "$@" >"$log_dir/$name.log" 2>&1 &
    eval "bg_pid_${name//-/_}=$!"
}

background_wait() {
    local name=$1 pid_var="bg_pid_${1//-/_}" rc=0
    wait "${!pid_var}" || rc=$?
    echo "=== $name (ran beside the stages above)"
    cat "$log_dir/$name.log"
    account "$name" "$rc"
}

# The end-to-end stages run their test files in two worker processes at once (run_e2e.py -j):
# most of a test's time is waiting, and every test's servers listen on ports of their own, so two
# workers on two cores take about half the wall time (e2e: 291 s → 137 s, e2e-pg: 397 s → 235 s).
export TALLY_E2E_JOBS=${TALLY_E2E_JOBS:-2}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
stage unit build/san/unit_tests
stage journal-lint tests/lint_journal.sh
stage log-lint tests/lint_log.sh
stage json-lint tests/lint_json.sh
stage fuzz-regress make --no-print-directory fuzz-regress
# The slow test (the 1-minute trending window expiring, ~75 s of waiting, little CPU) runs beside
# the stages below, against the release build, instead of adding its wait to the suite's time.
background_start e2e-slow env TALLYD=build/tallyd TALLY_E2E_SLOW=1 python3 tests/e2e/run_e2e.py \
    -k test_slow_1m_window_expiry -k test_slow_unknown_kid_fetch
stage e2e env TALLYD=build/tallyd python3 tests/e2e/run_e2e.py
stage e2e-sanitized env TALLYD=build/san/tallyd TALLY_SANITIZED=1 python3 tests/e2e/run_e2e.py
# The same suite on the PostgreSQL store (every test but the @embedded_only ones), plus the
# multi-node and failover tests (test_pg_*.py). Not TALLY_E2E_SLOW: the 75 s trending-window
# test runs once, beside the others (e2e-slow), to keep make test under 15 minutes.
# The seam's cases (tests/unit/test_seam.c, run on the embedded store in the unit stage) on the
# PostgreSQL store, under ASan+UBSan, against a throwaway cluster of its own (8–12 s), then the shards
# suite (tests/unit/test_shards.c: two databases as two shards).
stage seam-pg python3 tests/pg/seam.py build/san/unit_tests
stage e2e-pg env TALLYD=build/tallyd TALLY_STORE=pg python3 tests/e2e/run_e2e.py
# The PostgreSQL store's own paths under ASan+UBSan: the multi-node and failover tests (webhooks' and live counts' too), crashes,
# idempotency, concurrency, the change feed, import and erasure, the lists, voiding, feature versions (~180 s). The rest of the suite
# on PostgreSQL under the sanitizer would add ~2 minutes more; the release stage above runs it.
stage e2e-pg-sanitized env TALLYD=build/san/tallyd TALLY_SANITIZED=1 TALLY_STORE=pg \
    python3 tests/e2e/run_e2e.py -k test_pg_ -k test_crash -k test_idempotency \
    -k test_concurrency -k test_ops.Changes -k test_lifecycle_data -k test_many -k WebhookNodesTest -k LiveNodesTest -k test_lists \
    -k WebhookRaceNodesTest -k test_void -k test_features
# The same suite on two shards (TALLY_SHARDS=2: every server of a test is given two databases, items
# and users routed between them), the test files whose behaviour depends on the store: writes, keys,
# counts in the answers, crashes, the lists, voids, policies, export, the change feed and webhooks,
# live counts, trending, several nodes. The HTTP layer's files (authentication, limits,
# hostile input, proxies, caching, configuration) behave the same over any number of shards and run
# above only; so do test_shards*.py, which start their own two shards. Tests of the one-database
# forms (decimal cursors and ids) are skipped there, saying why (@one_shard); so is the limit of
# 10000 policies (PolicyLimitAndRestart, ~60 s of admin writes to shard 0 alone, as with one
# database). Three workers: the tests mostly wait (~200 s; two workers ~400 s). Not here, to keep
# make test under 25 minutes: test_lifecycle (start and stop, flags: the store's part is in
# test_lifecycle_data) and test_pg_failover (a standby promoted: on two shards in the patroni stage).
stage e2e-pg-shards env TALLYD=build/tallyd TALLY_STORE=pg TALLY_SHARDS=2 TALLY_E2E_JOBS=3 python3 tests/e2e/run_e2e.py \
    -k test_answer_counts -k test_concurrency -k test_crash -k test_export -k test_features -k test_idempotency \
    -k test_items -k test_lifecycle_data -k test_lists -k test_live -k test_many -k test_ops \
    -k test_pg_nodes -k test_pg_writer -k test_policies.PolicyOneMode -k test_policies.PolicyManyMode \
    -k test_policies.PolicyTwoNodes -k test_trending -k test_void -k test_webhooks
# PostgreSQL under Patroni, from Debian's packages (tests/pg/patronicluster.py: one etcd, a leader
# and its synchronous standby, fsync on): a postmaster killed alone restarted in place, and the
# primary's machine lost under keyed load on two nodes, the standby promoted by Patroni; then two
# shards, each its own Patroni cluster, shard 1's primary lost while shard 0 goes on (~2 minutes).
stage patroni env TALLYD=build/tallyd TALLY_PATRONI=1 python3 tests/e2e/run_e2e.py -k test_patroni
# The OpenAPI document, the JavaScript client and the pages in headless Chromium (~15 s).
stage js tests/js/run.sh
# The Debian package (make deb, from a copy in build/pkg/), lintian, its contents extracted with
# dpkg -x, the unit through systemd-analyze, make install DESTDIR=... (~60-90 s, most of it the
# package's own build).
stage package python3 tests/package/test_package.py
background_wait e2e-slow
# Every failure again at the end, with the line that says why (the stages' output above is long;
# a CI page may show only its start and its end).
if [ "$failed" -ne 0 ]; then
    echo "=== failures"
    for f in "$log_dir"/*.log; do
        awk -v st="$(basename "$f" .log)" '
            /^(FAIL|ERROR): / { name = $2; next }
            name != "" && /^[A-Za-z_.]*(Error|Exception|Exited)[:(]/ { print st ": " name ": " substr($0, 1, 300); name = ""; next }
            /^(FAIL|ERROR) +test_[a-z0-9_]+\.[A-Za-z0-9_]+\.test/ { next }  # an e2e test: its traceback says why
            /^(not ok|FAIL|ERROR) / { print st ": " substr($0, 1, 200) }
        ' "$f"
    done | head -n 60
fi
rm -rf "$log_dir"
echo "(whole suite: ${SECONDS}s)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
