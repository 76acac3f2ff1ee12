/* lmdb_write.c — the embedded store's write transaction: begin, commit (the journal's record, then
 * LMDB's commit or the epoch's), abort; rows, the log, counts, the checkpoint, pruning, auxiliary
 * records. Epochs: several batches committed into one LMDB transaction (EPOCH_MAX_MS in
 * lmdb_internal.h). */
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
#include "core/log.h"

/* --- the write transaction --- */

/* --- epochs (EPOCH_MAX_MS in lmdb_internal.h) ---
 *
 * A batch is its own LMDB transaction, or a child of the open epoch's. Committing a batch appends
 * its record (the epoch's txn id and the batch's part) and syncs it: the batch is durable, and its
 * commands are answered. When the writer said more is waiting (store_write_defer) and the epoch is
 * young and small, the epoch stays open: the next batch is its child, and the pages the batches
 * share are copied once, written once. Otherwise LMDB commits it (without a sync: the journal made
 * it durable), and readers see it all. Meanwhile the rows are served from the overlay. */

/* Whether the epoch may stay open after this batch. */
static bool epoch_may_grow(lmdb_store_t *s)
{
    if (!s->journal.recording || s->journal.broken)
        return false;
    if (s->epoch)
        return mono_ms() - s->epoch_started_ms < EPOCH_MAX_MS && s->epoch_bytes < EPOCH_MAX_BYTES &&
               s->epoch_ops < EPOCH_MAX_OPS && s->epoch_parts + 1 < JOURNALREC_PARTS_MAX;
    /* A new epoch: only with the map and the disk far from full, so that its commit finds room for
     * its pages (one that cannot leaves the journal broken until a restart). */
    MDB_envinfo info;
    MDB_stat st;
    struct statvfs vfs;
    int fd;
    return mdb_env_info(s->env, &info) == MDB_SUCCESS && mdb_env_stat(s->env, &st) == MDB_SUCCESS &&
           (uint64_t)info.me_mapsize > (uint64_t)(info.me_last_pgno + 1) * st.ms_psize + EPOCH_MAP_HEADROOM &&
           mdb_env_get_fd(s->env, &fd) == MDB_SUCCESS && fstatvfs(fd, &vfs) == 0 &&
           (uint64_t)vfs.f_bavail * vfs.f_frsize > EPOCH_MAP_HEADROOM;
}

/* LMDB's commit of the open epoch (writer thread, no batch open): readers see its batches. A
 * failure leaves them in the journal only, acknowledged: nothing more is committed until a restart
 * replays them. */
int lmdb_epoch_commit(lmdb_store_t *s)
{
    if (!s->epoch)
        return MDB_SUCCESS;
    /* the epoch is an LMDB write transaction: only the thread that began it (the writer) may end it */
    assert(pthread_equal(s->write.thread, pthread_self()));
    uint64_t txnid = (uint64_t)mdb_txn_id(s->epoch);
    bool changed = s->epoch_parts > 0;
    int rc = mdb_txn_commit(s->epoch);
    s->epoch = NULL;
    s->epoch_parts = 0;
    s->epoch_bytes = s->epoch_ops = 0;
    if (rc != MDB_SUCCESS) {
        s->journal.broken = true;
        log_line("level=error event=journal-broken reason=\"the commit of an epoch failed: %s\" (its batches are in "
                 "the journal; writes refused until a restart replays them)",
                 mdb_strerror(rc));
        return rc;
    }
    atomic_fetch_add(&s->commits, changed);
    lmdb_overlay_committed(&s->overlay, txnid);
    lmdb_journal_maybe_checkpoint(s);
    return MDB_SUCCESS;
}

void lmdb_write_defer(store_write_t *w_, bool (*more)(void *arg), void *arg)
{
    LMDB_WRITE_CHECK((lmdb_write_t *)w_);
    lmdb_store_t *s = ((lmdb_write_t *)w_)->store;
    s->defer = more;
    s->defer_arg = arg;
}

bool lmdb_pending(const store_t *s_)
{
    return ((const lmdb_store_t *)s_)->epoch != NULL;
}

int lmdb_flush(store_t *s_)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    assert(!s->write.active);
    return lmdb_rc(lmdb_epoch_commit(s));
}

int lmdb_write_begin(store_t *s_, store_write_t **out)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    struct lmdb_write *w = &s->write;
    assert(!w->active);
    /* a batch inside the open epoch is a child of its LMDB transaction: the writer thread's */
    assert(!s->epoch || pthread_equal(w->thread, pthread_self()));
    if (s->visitor) {
        log_line("level=error event=write-refused reason=\"another process owns the store\"");
        return STORE_ERROR;
    }
    s->defer = NULL;
    if (atomic_load(&s->journal.start_error)) { /* deferred by a full disk: tried again, else refused */
        char err[256];
        int rc = lmdb_journal_start(s, err, sizeof err);
        if (rc != STORE_OK) {
            if (rc != STORE_FULL)
                log_line("level=error event=write-refused reason=\"%s\"", err);
            return rc;
        }
    }
    int rc = mdb_txn_begin(s->env, s->epoch, 0, &w->txn); /* a child of the open epoch's, if any */
    if (rc != MDB_SUCCESS) {
        lmdb_epoch_commit(s); /* what the epoch holds is acknowledged: seen now, whatever this batch does */
        return lmdb_rc(rc);
    }
    w->active = true;
    w->thread = pthread_self();
    w->next_seq = s->next_seq;
    lmdb_journal_txn_reset(s);
    w->base.ops = &lmdb_store_ops;
    *out = &w->base;
    return STORE_OK;
}

int lmdb_write_commit(store_write_t *w_)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    assert(w->active);
    atomic_thread_fence(memory_order_release); /* the row filter's adds before the rows they stand for */
    lmdb_store_t *s = w->store;
    bool changed = s->journal.nops > 0, child = s->epoch != NULL;
    uint64_t txnid = (uint64_t)mdb_txn_id(w->txn); /* a child's is its epoch's */
    /* Durable first (the record, synced), visible after: a reader never sees what a crash could undo. */
    int rc = changed ? lmdb_journal_append(s, txnid, s->epoch_parts) : MDB_SUCCESS;
    if (rc != 0) {
        mdb_txn_abort(w->txn);
        lmdb_journal_txn_reset(s);
        w->active = false;
        lmdb_epoch_commit(s);
        return lmdb_rc(rc);
    }
    MDB_envinfo before = {0}, after = {0};
    if (!changed && !child)
        mdb_env_info(s->env, &before);
    /* asked once durable; the writer's question first, cheaper than a new epoch's look at the disk */
    bool hold = s->defer && s->defer(s->defer_arg) && epoch_may_grow(s);
    s->defer = NULL;
    if (!child && hold) { /* the batch's transaction becomes the epoch's */
        s->epoch = w->txn;
        s->epoch_started_ms = mono_ms();
        rc = MDB_SUCCESS;
    } else {
        rc = mdb_txn_commit(w->txn);
    }
    w->active = false;
    if (rc == MDB_SUCCESS && s->epoch && changed) {
        s->epoch_parts++;
        s->epoch_bytes += s->journal.pending_len;
        s->epoch_ops += s->journal.nops;
        /* its rows for readers (also when the epoch commits now: should that commit fail, the batch is
         * still durable and answered, and its rows must be seen); an overlay that cannot hold them
         * makes the epoch commit now */
        if (lmdb_overlay_add(s, txnid, s->journal.ops, s->journal.ops_len) != 0)
            hold = false;
    }
    if (changed && rc == MDB_SUCCESS && !child && !s->epoch)
        atomic_fetch_add(&s->commits, 1);
    if (changed)
        lmdb_journal_committed(s, rc == MDB_SUCCESS);
    else if (rc == MDB_SUCCESS && !child && !s->epoch && mdb_env_info(s->env, &after) == MDB_SUCCESS &&
             after.me_last_txnid != before.me_last_txnid) {
        /* a change that bypassed lmdb_put and its kin (a defect): made recoverable by a base that
         * holds it, at once, and said loudly */
        log_line("level=error event=journal-missed-change txn=%zu", after.me_last_txnid);
        s->next_seq = w->next_seq;
        return lmdb_rc(lmdb_journal_checkpoint_wait(s));
    }
    if (rc == MDB_SUCCESS) {
        s->next_seq = w->next_seq;
        atomic_store(&s->acked_seq, s->next_seq - 1);
    }
    /* A failure of the epoch's commit leaves this batch durable (its record), so it is still answered
     * as done; the journal is then broken, and a restart replays the epoch. */
    if (s->epoch && (rc != MDB_SUCCESS || !hold))
        lmdb_epoch_commit(s);
    else if (rc == MDB_SUCCESS && !s->epoch)
        lmdb_journal_maybe_checkpoint(s);
    return lmdb_rc(rc);
}

void lmdb_write_abort(store_write_t *w_)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    assert(w->active);
    mdb_txn_abort(w->txn);
    lmdb_journal_txn_reset(w->store);
    w->active = false;
    w->store->defer = NULL;
    lmdb_epoch_commit(w->store); /* the batches before this one are acknowledged: seen now */
}

int lmdb_row_get(store_write_t *w_, span_t item, span_t user, reaction_row_t *row)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_txn_row_get(w->store, w->txn, item, user, row);
}

/* The row's value: its reaction part, then the lists' record the stored value ends with (kept: the
 * writer changes the reaction, the fold the record). */
int lmdb_row_put(store_write_t *w_, span_t item, span_t user, const reaction_row_t *row)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    char kbuf[KEY_BUF_LEN];
    uint8_t vbuf[ROW_VALUE_SET_LEN + LMDB_LIST_RECORD_MAX];
    uint16_t several;
    vbuf[0] = lmdb_set_encode(w->store, row->set, &several);
    size_t len = vbuf[0] == SET_MARK ? ROW_VALUE_SET_LEN : ROW_VALUE_LEN;
    if (vbuf[0] == SET_MARK)
        lmdb_put_u16(vbuf + 1, several);
    lmdb_put_u64(vbuf + len - 8, row->version);
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf}, old;
    int rc = MDB_NOTFOUND;
    if (!atomic_load_explicit(&w->store->filter_ready, memory_order_acquire) ||
        pairfilter_may_contain(&w->store->filter, item, user))
        rc = mdb_get(w->txn, w->store->rows, &key, &old);
    if (rc == MDB_SUCCESS) {
        size_t base = lmdb_row_base_len(&old);
        if (base == 0 || old.mv_size - base > LMDB_LIST_RECORD_MAX)
            return lmdb_corrupt(item, "a row value of a length no row has");
        memcpy(vbuf + len, (const uint8_t *)old.mv_data + base, old.mv_size - base);
        len += old.mv_size - base;
    } else if (rc != MDB_NOTFOUND) {
        return lmdb_rc(rc);
    }
    MDB_val val = {len, vbuf};
    pairfilter_add(&w->store->filter, item, user); /* before the row can be seen (store_write_commit) */
    return lmdb_rc(lmdb_put(w->txn, w->store->rows, &key, &val, 0));
}

int lmdb_log_append(store_write_t *w_, const transition_t *t, uint64_t *seq)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    uint8_t vbuf[LOG_HEADER_LEN + LOG_SETS_LEN + 2 * 255];
    assert(t->item.len <= 255 && t->user.len <= 255);
    lmdb_put_u64(vbuf, t->at_ms);
    lmdb_put_u64(vbuf + 8, transition_version_pack(t));
    uint16_t from, to;
    vbuf[16] = lmdb_set_encode(s, t->from, &from);
    vbuf[17] = lmdb_set_encode(s, t->to, &to);
    size_t head = LOG_HEADER_LEN;
    if (vbuf[16] == SET_MARK || vbuf[17] == SET_MARK) { /* several kinds: both as sets */
        vbuf[16] = vbuf[17] = SET_MARK;
        lmdb_put_u16(vbuf + head, from);
        lmdb_put_u16(vbuf + head + 2, to);
        head += LOG_SETS_LEN;
    }
    vbuf[18] = (uint8_t)t->item.len;
    memcpy(vbuf + head, t->item.ptr, t->item.len);
    memcpy(vbuf + head + t->item.len, t->user.ptr, t->user.len);
    uint64_t n = w->next_seq;
    MDB_val key = {sizeof n, &n}, val = {head + t->item.len + t->user.len, vbuf};
    int rc = lmdb_put(w->txn, s->log, &key, &val, MDB_APPEND);
    if (rc == MDB_SUCCESS) {
        *seq = n;
        w->next_seq = n + 1;
    }
    return lmdb_rc(rc);
}

int lmdb_log_put(store_write_t *w_, uint64_t seq, const transition_t *t)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    uint64_t got;
    if (seq < w->next_seq)
        return STORE_ERROR; /* not above the log's positions */
    w->next_seq = seq;
    return lmdb_log_append(w_, t, &got);
}

int lmdb_log_scan(store_write_t *w_, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_txn_log_scan(w->store, w->txn, after, limit, fn, arg);
}

int lmdb_counts_folded(store_write_t *w_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_counts_get(w->store, w->txn, item, counts);
}

/* The writer reads its counts in the transaction (store_counts_folded): never asked of this store. */
int lmdb_counts_at_commit(store_write_t *w_, store_counts_ask_t *asks, size_t n)
{
    (void)w_, (void)asks, (void)n;
    return STORE_ERROR;
}

int lmdb_counts_add(store_write_t *w_, span_t item, const int64_t deltas[KINDS_MAX + 1])
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    int64_t counts[KINDS_MAX + 1];
    int rc = lmdb_counts_get(s, w->txn, item, counts);
    if (rc != STORE_OK)
        return rc;
    for (int c = s->mode == REACTION_MODE_MANY ? KIND_NONE : 1; c <= s->kinds.count; c++) { /* [0]: the reactors */
        /* A count below zero after the fold means the stored counts and the log disagree: the data
         * on the disk is wrong (the fold of the program's own transitions cannot do it). */
        if (__builtin_add_overflow(counts[c], deltas[c], &counts[c]) || counts[c] < 0)
            return lmdb_corrupt(item, "the stored count and the log disagree: the fold would make it negative");
    }
    char kbuf[KEY_BUF_LEN];
    uint8_t disk[1 + (KINDS_MAX + 1) * sizeof(int64_t)];
    MDB_val key = {lmdb_pair_key(kbuf, item, (span_t){"", 0}), kbuf},
            val = {lmdb_counts_encode(s, s->mode, counts, disk), disk};
    return lmdb_rc(lmdb_put(w->txn, s->counts, &key, &val, 0));
}

int lmdb_checkpoint_get(store_write_t *w_, uint64_t *seq)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_txn_checkpoint_get(w->store, w->txn, seq);
}

int lmdb_checkpoint_put(store_write_t *w_, uint64_t seq)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_rc(lmdb_meta_put(w->txn, w->store->meta, "checkpoint", &seq, sizeof seq));
}

int lmdb_log_prune(store_write_t *w_, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
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

int lmdb_aux_put(store_write_t *w_, span_t key, span_t value)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    MDB_val k = {key.len, (void *)key.ptr}, v = {value.len, (void *)value.ptr};
    return lmdb_rc(lmdb_put(w->txn, w->store->aux, &k, &v, 0));
}

int lmdb_user_voided_txn(MDB_txn *txn, MDB_dbi aux, span_t user, bool *voided)
{
    char kbuf[sizeof STORE_VOID_PREFIX + ID_MAX_LEN];
    size_t plen = sizeof STORE_VOID_PREFIX - 1;
    *voided = false;
    if (user.len > ID_MAX_LEN)
        return STORE_ERROR;
    memcpy(kbuf, STORE_VOID_PREFIX, plen);
    memcpy(kbuf + plen, user.ptr, user.len);
    MDB_val k = {plen + user.len, kbuf}, v;
    int rc = mdb_get(txn, aux, &k, &v);
    *voided = rc == MDB_SUCCESS;
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* The single writer decides every write: the record as its transaction sees it is the truth. */
int lmdb_user_voided(store_write_t *w_, span_t user, bool *voided)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_user_voided_txn(w->txn, w->store->aux, user, voided);
}

int lmdb_aux_delete_range(store_write_t *w_, span_t from, span_t to)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
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

/* One writer thread, one write transaction at a time: no lock is needed to decide. */
int lmdb_aux_read_locked(store_write_t *w_, span_t prefix, store_aux_fn fn, void *arg)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_aux_walk(w->txn, w->store->aux, prefix, fn, arg);
}

/* The embedded store gives every position at append: nothing is left to number at commit. */
int lmdb_write_commit_at(store_write_t *w, uint64_t *log_base)
{
    *log_base = 0;
    return lmdb_write_commit(w);
}

/* One process, one writer: nothing to lock or read ahead; the B-tree answers each read at once. */
int lmdb_write_prepare(store_write_t *w_, const store_pair_t *rows, size_t nrows, const store_pair_t *keys,
                       size_t nkeys, const store_pair_t *claims, size_t nclaims, size_t fold_scan)
{
    LMDB_WRITE_CHECK((lmdb_write_t *)w_);
    (void)rows, (void)nrows, (void)keys, (void)nkeys, (void)claims, (void)nclaims, (void)fold_scan;
    return STORE_OK;
}

/* The writer's own transactions fold (one writer: no other process to leave it to). */
bool lmdb_write_may_fold(store_write_t *w_)
{
    LMDB_WRITE_CHECK((lmdb_write_t *)w_);
    return true;
}

bool lmdb_folds_apart(const store_t *s_)
{
    (void)s_;
    return false;
}

int lmdb_fold_begin(store_t *s_, store_write_t **out)
{
    (void)s_, (void)out;
    return STORE_ERROR; /* store_folds_apart is false: the writer's transactions fold */
}
