/* lmdb_views.c — the embedded store's reads, from a snapshot only: counts and rows (with the
 * overlay of an open epoch), a feed page, the log and its bounds, recount's tallies, the items,
 * export's rows, the log by time, auxiliary records, statistics. */
#include "store/lmdb/lmdb_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/journalrec.h"

/* --- snapshots --- */

int lmdb_read_begin(store_t *s_, store_read_t **out)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    lmdb_read_t *r = malloc(sizeof *r);
    if (!r)
        return STORE_ERROR;
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &r->txn);
    if (rc != MDB_SUCCESS) {
        free(r);
        return lmdb_rc(rc);
    }
    /* pairs in the row filter were added before the commits this snapshot sees (store_write_commit) */
    atomic_thread_fence(memory_order_acquire);
    r->store = s;
    r->base.ops = &lmdb_store_ops;
    *out = &r->base;
    return STORE_OK;
}

void lmdb_read_end(store_read_t *r_)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    if (!r)
        return;
    mdb_txn_abort(r->txn);
    free(r);
}

/* No single-statement mode here: a snapshot is as cheap as one question. */
int lmdb_read_begin_single(store_t *s_, store_read_t **out)
{
    return lmdb_read_begin(s_, out);
}

int lmdb_read_counts(store_read_t *r_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    return lmdb_counts_get(r->store, r->txn, item, counts);
}

/* The overlay first: a row an open epoch's batch wrote is not in any snapshot yet. */
int lmdb_read_row(store_read_t *r_, span_t item, span_t user, reaction_row_t *row)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf};
    for (;;) {
        uint8_t vbuf[ROW_VALUE_SET_LEN];
        size_t vlen = 0;
        bool gone = false;
        int found = lmdb_overlay_get(&r->store->overlay, (uint64_t)mdb_txn_id(r->txn), &key, vbuf, &vlen, &gone);
        if (found == 0)
            return lmdb_txn_row_get(r->store, r->txn, item, user, row);
        if (found > 0) {
            MDB_val val = {vlen, vbuf};
            *row = (reaction_row_t){KIND_NONE, 0};
            if (!gone)
                lmdb_row_decode(r->store, &val, row);
            return STORE_OK;
        }
        /* a snapshot older than the rows the overlay still holds: a newer one (rare) */
        mdb_txn_reset(r->txn);
        int rc = mdb_txn_renew(r->txn);
        if (rc != MDB_SUCCESS)
            return lmdb_rc(rc);
    }
}

uint64_t lmdb_read_acknowledged(store_read_t *r_)
{
    return atomic_load(&((lmdb_read_t *)r_)->store->acked_seq);
}

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

static int tally_item(lmdb_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1])
{
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
        bool voided = false;
        if (row.set != KINDSET_EMPTY &&
            (rc = lmdb_user_voided_txn(r->txn, s->aux, (span_t){(const char *)key.mv_data + plen, key.mv_size - plen},
                                       &voided)) != STORE_OK)
            break;
        if (voided)
            continue; /* a voided user's rows do not count */
        for (kindset_t k = row.set; k; k &= k - 1)
            counts[__builtin_ctz(k)]++;
        counts[KIND_NONE] += row.set != KINDSET_EMPTY; /* the reactors */
    }
    mdb_cursor_close(cur);
    if (rc == STORE_ERROR)
        return rc;
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* One item after the other: the snapshot is in memory, a round trip costs nothing here. */
int lmdb_read_tally_items(store_read_t *r_, const span_t *items, size_t n, int64_t (*counts)[KINDS_MAX + 1])
{
    int rc = STORE_OK;
    for (size_t i = 0; i < n && rc == STORE_OK; i++)
        rc = tally_item((lmdb_read_t *)r_, items[i], counts[i]);
    return rc;
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

int lmdb_read_aux(store_read_t *r_, span_t prefix, store_aux_fn fn, void *arg)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    return lmdb_aux_walk(r->txn, r->store->aux, prefix, fn, arg);
}

/* A page's counts and rows from the B-tree (and the overlay): no round trips to save, so one lookup
 * of each per item. */
int lmdb_read_many(store_read_t *r, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                   reaction_row_t *rows)
{
    int rc = STORE_OK;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        rc = lmdb_read_counts(r, items[i], counts[i]);
        if (rc == STORE_OK && user.len)
            rc = lmdb_read_row(r, items[i], user, &rows[i]);
    }
    return rc;
}
