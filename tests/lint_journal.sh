#!/usr/bin/env bash
# lint_journal.sh — the embedded store's journal sees every change only if every write goes through
# its wrappers (src/store/lmdb/lmdb_journal.c: lmdb_put, lmdb_del, lmdb_cursor_put, lmdb_cursor_del,
# lmdb_empty, lmdb_reserve): a raw liblmdb write call anywhere else in src/ is a change a crash would
# lose. A call made only while the store opens (synced by LMDB itself, before the journal starts)
# carries the comment "journal: opening only". Ends with "journal-lint: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
found=$(grep -rnE '\bmdb_(put|del|cursor_put|cursor_del|drop)\(' src --include='*.c' |
    grep -v '^src/store/lmdb/lmdb_journal.c:' | grep -v 'journal: opening only' || true)
if [ -n "$found" ]; then
    echo "raw liblmdb writes outside the journal's wrappers:"
    echo "$found"
    echo "journal-lint: 0 passed, 1 failed"
    exit 1
fi
echo "journal-lint: 1 passed, 0 failed"
