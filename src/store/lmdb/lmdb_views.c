/* store_lmdb_views.c — the LMDB store's reads for recount, the change feed, export and statistics;
 * walks over one item's or one user's rows; log pruning and the log by time; auxiliary records;
 * backup. */
#include "store/lmdb/lmdb_internal.h"

#include <stdlib.h>

/* --- snapshot views for recount, the change feed and statistics --- */

int lmdb_read_checkpoint(store_read_t *r_, uint64_t *seq)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    return lmdb_txn_checkpoint_get(r->store, r->txn, seq);
}

int lmdb_read_log(store_read_t *r_, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    return lmdb_txn_log_scan(r->store, r->txn, after, limit, fn, arg);
}

int lmdb_read_log_bounds(store_read_t *r_, uint64_t *first, uint64_t *last)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    MDB_cursor *cur;
    MDB_val key, val;
    *first = *last = 0;
    int rc = mdb_cursor_open(r->txn, r->store->log, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    if ((rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST)) == MDB_SUCCESS) {
        *first = lmdb_get_u64(key.mv_data);
        if ((rc = mdb_cursor_get(cur, &key, &val, MDB_LAST)) == MDB_SUCCESS)
            *last = lmdb_get_u64(key.mv_data);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

int lmdb_read_tally_item(store_read_t *r_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    const lmdb_store_t *s = r->store;
    char prefix[KEY_BUF_LEN];
    size_t plen = lmdb_pair_key(prefix, item, (span_t){"", 0});
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, s->rows, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key = {plen, prefix}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size <= plen || memcmp(key.mv_data, prefix, plen) != 0)
            break;
        reaction_row_t row;
        lmdb_row_decode(s, &val, &row);
        for (kindset_t k = row.set; k; k &= k - 1)
            counts[__builtin_ctz(k)]++;
        counts[KIND_NONE] += row.set != KINDSET_EMPTY; /* the reactors */
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* The item of a rows or counts key ([len][item]…), or false when the key is malformed. */
bool lmdb_key_item(const MDB_val *key, span_t *item)
{
    const uint8_t *p = key->mv_data;
    if (key->mv_size < 1 || key->mv_size < (size_t)1 + p[0])
        return false;
    *item = (span_t){(const char *)p + 1, p[0]};
    return true;
}

/* Positions cur at the first key whose item sorts after `after` (all keys when after is empty). */
static int seek_after_item(MDB_cursor *cur, span_t after, MDB_val *key, MDB_val *val)
{
    if (after.len == 0)
        return mdb_cursor_get(cur, key, val, MDB_FIRST);
    char buf[KEY_BUF_LEN];
    size_t n = lmdb_pair_key(buf, after, (span_t){"", 0});
    buf[n++] = (char)0xff; /* past every user of that item: user bytes are ASCII */
    key->mv_size = n;
    key->mv_data = buf;
    return mdb_cursor_get(cur, key, val, MDB_SET_RANGE);
}

static int item_cmp(span_t a, span_t b)
{
    if (a.len != b.len)
        return a.len < b.len ? -1 : 1;
    return memcmp(a.ptr, b.ptr, a.len);
}

int lmdb_read_items(store_read_t *r_, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    const lmdb_store_t *s = r->store;
    MDB_cursor *rows = NULL, *counts = NULL;
    *visited = 0;
    int rc = mdb_cursor_open(r->txn, s->rows, &rows);
    if (rc == MDB_SUCCESS)
        rc = mdb_cursor_open(r->txn, s->counts, &counts);
    if (rc != MDB_SUCCESS) {
        if (rows)
            mdb_cursor_close(rows);
        return lmdb_rc(rc);
    }
    MDB_val rkey, rval, ckey, cval;
    int rrc = seek_after_item(rows, after, &rkey, &rval);
    int crc = seek_after_item(counts, after, &ckey, &cval);
    int result = STORE_OK;
    while (*visited < limit && (rrc == MDB_SUCCESS || crc == MDB_SUCCESS)) {
        span_t ritem = {0}, citem = {0};
        if ((rrc == MDB_SUCCESS && !lmdb_key_item(&rkey, &ritem)) ||
            (crc == MDB_SUCCESS && !lmdb_key_item(&ckey, &citem))) {
            result = STORE_ERROR;
            break;
        }
        int cmp = rrc != MDB_SUCCESS ? 1 : crc != MDB_SUCCESS ? -1 : item_cmp(ritem, citem);
        span_t item = cmp <= 0 ? ritem : citem;
        char copy[256];
        memcpy(copy, item.ptr, item.len);
        item.ptr = copy;
        (*visited)++;
        if (fn(arg, item) != 0)
            break;
        if (cmp <= 0)
            rrc = seek_after_item(rows, item, &rkey, &rval);
        if (cmp >= 0)
            crc = seek_after_item(counts, item, &ckey, &cval);
    }
    if (result == STORE_OK &&
        ((rrc != MDB_SUCCESS && rrc != MDB_NOTFOUND) || (crc != MDB_SUCCESS && crc != MDB_NOTFOUND)))
        result = lmdb_rc(rrc != MDB_SUCCESS && rrc != MDB_NOTFOUND ? rrc : crc);
    mdb_cursor_close(rows);
    mdb_cursor_close(counts);
    return result;
}

int lmdb_stats(store_t *s_, store_stats_t *st)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    MDB_txn *txn;
    MDB_stat ms;
    MDB_envinfo info;
    *st = (store_stats_t){0};
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    if ((rc = mdb_stat(txn, s->rows, &ms)) == MDB_SUCCESS)
        st->rows = ms.ms_entries;
    if (rc == MDB_SUCCESS && (rc = mdb_stat(txn, s->counts, &ms)) == MDB_SUCCESS)
        st->items = ms.ms_entries;
    if (rc == MDB_SUCCESS && (rc = mdb_stat(txn, s->log, &ms)) == MDB_SUCCESS) {
        st->log_entries = ms.ms_entries;
        st->log_bytes = (uint64_t)(ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages) * ms.ms_psize;
    }
    if (rc == MDB_SUCCESS)
        rc = lmdb_idem_records(s, txn, &st->idem_records) == STORE_OK ? MDB_SUCCESS : MDB_PANIC;
    if (rc == MDB_SUCCESS && (rc = mdb_env_info(s->env, &info)) == MDB_SUCCESS && mdb_env_stat(s->env, &ms) == 0)
        st->used_bytes = (uint64_t)(info.me_last_pgno + 1) * ms.ms_psize;
    if (rc == MDB_SUCCESS)
        rc = lmdb_txn_checkpoint_get(s, txn, &st->checkpoint) == STORE_OK ? MDB_SUCCESS : MDB_PANIC;
    st->row_filter_ready = atomic_load(&s->filter_ready);
    st->journal = s->journal.recording;
    st->journal_records = atomic_load(&s->journal.records);
    st->journal_bytes = atomic_load(&s->journal.bytes);
    st->checkpoints = atomic_load(&s->journal.checkpoints);
    st->commits = atomic_load(&s->commits);
    st->checkpoint_failures = atomic_load(&s->journal.checkpoint_failures);
    st->last_checkpoint_seconds = (double)atomic_load(&s->journal.last_checkpoint_ms) / 1000.0;
    mdb_txn_abort(txn);
    return lmdb_rc(rc);
}

int lmdb_backup(store_t *s_, const char *dir)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    return lmdb_rc(mdb_env_copy2(s->env, dir, MDB_CP_COMPACT));
}

int lmdb_log_prune(store_write_t *w_, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    MDB_cursor *cur;
    MDB_val key, val;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, w->store->log, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    while (*deleted < limit && (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST)) == MDB_SUCCESS) {
        if (lmdb_get_u64(key.mv_data) > upto_seq || val.mv_size < 8 || lmdb_get_u64(val.mv_data) >= before_ms)
            break;
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* --- walks over one item's rows and over the items a user has rows on, for deletion and erasure (writer) --- */

/* Calls fn(arg, rest) for the keys of dbi that start with [len][prefix] and sort after
 * [len][prefix][after], at most limit; rest is the key past the prefix. */
static int prefix_walk(MDB_txn *txn, MDB_dbi dbi, span_t prefix, span_t after, size_t limit,
                       int (*fn)(void *arg, span_t rest), void *arg, size_t *visited)
{
    char start[KEY_BUF_LEN + 1], pbuf[KEY_BUF_LEN];
    size_t plen = lmdb_pair_key(pbuf, prefix, (span_t){"", 0});
    size_t slen = lmdb_pair_key(start, prefix, after);
    if (after.len)
        start[slen++] = '\0'; /* strictly after: the smallest key greater than prefix+after */
    MDB_cursor *cur;
    *visited = 0;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key = {slen, start}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS && *visited < limit;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size <= plen || memcmp(key.mv_data, pbuf, plen) != 0)
            break;
        char rest[KEY_BUF_LEN];
        size_t rlen = key.mv_size - plen;
        memcpy(rest, (const char *)key.mv_data + plen, rlen);
        (*visited)++;
        if (fn(arg, (span_t){rest, rlen}) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

int lmdb_item_users(store_write_t *w_, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg,
                    size_t *visited)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    return prefix_walk(w->txn, w->store->rows, item, after, limit, fn, arg, visited);
}

/* The items where user has a row: each item's rows are one key range, so the user's row is one
 * lookup in it, and the next item is one seek away (seek_after_item). A visit is one item; the
 * cursor stays on its page while keys are near. */
int lmdb_read_rows(store_read_t *r_, store_row_fn fn, void *arg)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    const lmdb_store_t *s = r->store;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, s->rows, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key, val;
    int result = STORE_OK;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        span_t item;
        if (!lmdb_key_item(&key, &item)) {
            result = STORE_ERROR;
            break;
        }
        span_t user = {item.ptr + item.len, key.mv_size - 1 - item.len};
        reaction_row_t row;
        lmdb_row_decode(s, &val, &row);
        if (fn(arg, item, user, &row) != 0)
            break;
    }
    if (result == STORE_OK && rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        result = lmdb_rc(rc);
    mdb_cursor_close(cur);
    return result;
}

/* --- the log by time, and auxiliary records --- */

static int log_at(const lmdb_store_t *s, MDB_txn *txn, uint64_t seq, uint64_t *at_ms)
{
    MDB_val key = {sizeof seq, &seq}, val;
    int rc = mdb_get(txn, s->log, &key, &val);
    if (rc == MDB_SUCCESS && val.mv_size >= 8)
        *at_ms = lmdb_get_u64(val.mv_data);
    return rc;
}

int lmdb_read_log_seek(store_read_t *r_, uint64_t at_ms, uint64_t *seq)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    uint64_t first, last, at = 0;
    int rc = lmdb_read_log_bounds(r_, &first, &last);
    if (rc != STORE_OK)
        return rc;
    if (first == 0) {
        *seq = 1;
        return STORE_OK;
    }
    uint64_t lo = first, hi = last + 1; /* the answer is in [lo, hi] */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((rc = log_at(r->store, r->txn, mid, &at)) != MDB_SUCCESS)
            return lmdb_rc(rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc); /* the log has no holes */
        if (at < at_ms)
            lo = mid + 1;
        else
            hi = mid;
    }
    *seq = lo;
    return STORE_OK;
}

int lmdb_aux_put(store_write_t *w_, span_t key, span_t value)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    MDB_val k = {key.len, (void *)key.ptr}, v = {value.len, (void *)value.ptr};
    return lmdb_rc(lmdb_put(w->txn, w->store->aux, &k, &v, 0));
}

int lmdb_aux_delete_range(store_write_t *w_, span_t from, span_t to)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(w->txn, w->store->aux, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key, val;
    /* Seek again after each deletion: once the last record of the database is deleted, the
     * cursor has no current record (MDB_GET_CURRENT fails with EINVAL, voiding the commit). */
    for (key = (MDB_val){from.len, (void *)from.ptr};
         (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE)) == MDB_SUCCESS;
         key = (MDB_val){from.len, (void *)from.ptr}) {
        size_t n = key.mv_size < to.len ? key.mv_size : to.len;
        int cmp = memcmp(key.mv_data, to.ptr, n);
        if (cmp > 0 || (cmp == 0 && key.mv_size >= to.len))
            break;
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* The records under prefix in txn (a snapshot or the write transaction). */
static int aux_walk(MDB_txn *txn, MDB_dbi dbi, span_t prefix, store_aux_fn fn, void *arg)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key = {prefix.len, (void *)prefix.ptr}, val;
    /* LMDB takes no empty key: every record is read from the first */
    for (rc = mdb_cursor_get(cur, &key, &val, prefix.len ? MDB_SET_RANGE : MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size < prefix.len || memcmp(key.mv_data, prefix.ptr, prefix.len) != 0)
            break;
        if (fn(arg, (span_t){key.mv_data, key.mv_size}, (span_t){val.mv_data, val.mv_size}) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

int lmdb_read_aux(store_read_t *r_, span_t prefix, store_aux_fn fn, void *arg)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    return aux_walk(r->txn, r->store->aux, prefix, fn, arg);
}

/* One writer thread, one write transaction at a time: no lock is needed to decide. */
int lmdb_aux_read_locked(store_write_t *w_, span_t prefix, store_aux_fn fn, void *arg)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    return aux_walk(w->txn, w->store->aux, prefix, fn, arg);
}
