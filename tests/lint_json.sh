#!/bin/sh
# lint_json.sh — every JSON document tallyd or tally writes with jansson prints its reals with 15
# significant digits (JSON_REALS, core/jsontext.h), so 0.1 is never 0.10000000000000001. Fails on
# a json_dumps, json_dumpb, json_dumpf or json_dumpfd in src whose call does not carry JSON_REALS.
cd "$(dirname "$0")/.." || exit 1
bad=$(grep -rnE 'json_dump(s|b|f|fd|_callback)\(' src --include='*.c' | grep -v 'JSON_REALS')
if [ -n "$bad" ]; then
    echo "lint_json: a JSON dump without JSON_REALS (core/jsontext.h):"
    echo "$bad"
    echo "lint_json: 0 passed, 1 failed"
    exit 1
fi
echo "lint_json: 1 passed, 0 failed"
