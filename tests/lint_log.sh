#!/bin/sh
# lint_log.sh — every line tallyd writes to standard error goes through core/log.c (log_line,
# log_line_to), so --log-format covers all of them. Fails on another write to stderr in the code
# tallyd is built from (tally.c, the operator's tool, and log.c itself are exempt).
cd "$(dirname "$0")/.." || exit 1
bad=$(grep -rnE 'fprintf\(stderr|fputs\([^;]*stderr|perror\(|fwrite\([^;]*stderr|dprintf\(2|write\(2,' src \
      --include='*.c' | grep -v '^src/tally\.c:' | grep -v '^src/core/log\.c:')
if [ -n "$bad" ]; then
    echo "lint_log: writes to stderr outside core/log.c (use log_line):"
    echo "$bad"
    echo "lint_log: 0 passed, 1 failed"
    exit 1
fi
echo "lint_log: 1 passed, 0 failed"
