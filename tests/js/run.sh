#!/usr/bin/env bash
# run.sh — the JavaScript tests (node --test): the OpenAPI document, the client, the pages in
# headless Chromium. Needs `make deps` (npm ci: node_modules) and build/tallyd (or $TALLYD).
# Ends with "js: N passed, N failed, N skipped" for tests/run_all.sh.
set -u
cd "$(dirname "$0")/../.."
if [ ! -d node_modules/playwright-core ]; then
    echo "node_modules is missing: run make deps (npm ci)"
    echo "js: 0 passed, 1 failed"
    exit 1
fi
out=$(mktemp /tmp/tally-js-XXXXXX)
node --test --test-concurrency=2 --test-reporter=tap "${@:-tests/js/}" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
pass=$(grep -E '^# pass [0-9]+' "$out" | tail -n 1 | awk '{print $3}')
fail=$(grep -E '^# fail [0-9]+' "$out" | tail -n 1 | awk '{print $3}')
skip=$(grep -E '^# skipped [0-9]+' "$out" | tail -n 1 | awk '{print $3}')
rm -f "$out"
pass=${pass:-0}
fail=${fail:-0}
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
    fail=1 # the runner failed without a failing test (a crash, a file that did not load)
fi
echo "js: $pass passed, $fail failed, ${skip:-0} skipped"
[ "$fail" -eq 0 ]
