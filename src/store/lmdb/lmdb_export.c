/* lmdb_export.c — the embedded store's page of rows for an export: a cursor placed after the last
 * row of the page before, in the snapshot the export holds (one read transaction for all pages). */
#include "store/lmdb/lmdb_internal.h"

int lmdb_export_page(store_read_t *r_, span_t after_item, span_t after_user, size_t limit, store_row_fn fn, void *arg,
                     size_t *visited)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    const lmdb_store_t *s = r->store;
    *visited = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, s->rows, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {0}, val;
    bool skip_equal = false;
    if (after_item.len) {
        key = (MDB_val){lmdb_pair_key(kbuf, after_item, after_user), kbuf};
        rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
        skip_equal = true;
    } else {
        rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
    }
    int result = STORE_OK;
    for (; rc == MDB_SUCCESS && *visited < limit; rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        span_t item;
        if (!lmdb_key_item(&key, &item)) {
            result = STORE_ERROR;
            break;
        }
        span_t user = {item.ptr + item.len, key.mv_size - 1 - item.len};
        if (skip_equal) { /* the page before ended on this row */
            skip_equal = false;
            if (span_eq(item, after_item) && span_eq(user, after_user))
                continue;
        }
        reaction_row_t row;
        lmdb_row_decode(s, &val, &row);
        ++*visited;
        if (fn(arg, item, user, &row) != 0)
            break;
    }
    if (result == STORE_OK && rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        result = lmdb_rc(rc);
    mdb_cursor_close(cur);
    return result;
}
