/* lmdb_store.c — the embedded store: one directory, LMDB (one writer, lock-free MVCC readers). This file
 * opens the store (schema, kinds, mode, the row filter) and closes it, and copies it (backup). The
 * keys and values are lmdb_codec.c's; snapshots are lmdb_views.c's, the write transaction
 * lmdb_write.c's, idempotency records lmdb_idem.c's, the lists lmdb_lists.c's, the journal
 * lmdb_journal.c's. */
#include "store/lmdb/lmdb_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/journalrec.h"
#include "core/log.h"
#include "store/lmdb/lmdb.h"

/* Reconciles the configured kinds with the stored ones; writes the list back when kinds were added. */
static int kinds_reconcile(lmdb_store_t *s, MDB_txn *txn, const kinds_t *kinds, char *err, size_t errlen)
{
    kinds_t stored = {0};
    MDB_val val;
    int rc = lmdb_meta_get(txn, s->meta, "kinds", &val);
    if (rc == MDB_SUCCESS) {
        char list[KINDS_MAX * (KIND_NAME_MAX + 1) + 1];
        if (val.mv_size >= sizeof list) {
            snprintf(err, errlen, "stored kinds list is corrupt");
            return STORE_ERROR;
        }
        memcpy(list, val.mv_data, val.mv_size);
        list[val.mv_size] = '\0';
        char perr[128];
        if (kinds_parse(&stored, list, perr, sizeof perr) != 0) {
            snprintf(err, errlen, "stored kinds list is corrupt: %s", perr);
            return STORE_ERROR;
        }
    } else if (rc != MDB_NOTFOUND) {
        snprintf(err, errlen, "reading kinds: %s", mdb_strerror(rc));
        return lmdb_rc(rc);
    }
    if (!kinds) { /* adopt what the directory holds (the operator's tool) */
        if (stored.count == 0) {
            snprintf(err, errlen, "no reactions are stored here: not a tally data directory");
            return STORE_ERROR;
        }
        kinds = &stored;
    }
    s->kinds = *kinds;
    for (int d = 1; d <= stored.count; d++) {
        int c = kinds_find(kinds, span_of(stored.names[d]), false);
        if (c < 0) {
            snprintf(err, errlen,
                     "the data directory holds reactions of kind '%s', which --reactions no longer lists; "
                     "kinds can be added but not removed",
                     stored.names[d]);
            return STORE_ERROR;
        }
        s->db_to_cfg[d] = c;
        s->cfg_to_db[c] = d;
    }
    bool added = false;
    for (int c = 1; c <= kinds->count; c++) {
        if (s->cfg_to_db[c])
            continue;
        if (stored.count == KINDS_MAX) {
            snprintf(err, errlen, "at most %d reaction kinds can ever be stored", KINDS_MAX);
            return STORE_ERROR;
        }
        stored.count++;
        snprintf(stored.names[stored.count], sizeof stored.names[stored.count], "%s", kinds->names[c]);
        s->db_to_cfg[stored.count] = c;
        s->cfg_to_db[c] = stored.count;
        added = true;
    }
    s->db_kinds = stored.count;
    if (added) {
        char list[KINDS_MAX * (KIND_NAME_MAX + 1) + 1];
        size_t n = 0;
        for (int d = 1; d <= stored.count; d++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", d > 1 ? "," : "", stored.names[d]);
        rc = lmdb_meta_put(txn, s->meta, "kinds", list, n);
        if (rc != MDB_SUCCESS) {
            snprintf(err, errlen, "writing kinds: %s", mdb_strerror(rc));
            return lmdb_rc(rc);
        }
    }
    return STORE_OK;
}

/* Version 1 kept a user index (user_items: [len][user][item] → "") for erasure. It cost a random page
 * write per new row, about a third of the bytes a write puts on the disk; erasure now looks each item
 * up instead (store_user_items). Upgrading drops the index, in the opening transaction. */
static int schema_upgrade_from_1(MDB_txn *txn)
{
    MDB_dbi user_items;
    int rc = mdb_dbi_open(txn, "user_items", 0, &user_items);
    if (rc == MDB_SUCCESS)
        rc = mdb_drop(txn, user_items, 1); /* journal: opening only */
    return rc == MDB_NOTFOUND ? MDB_SUCCESS : rc;
}

/* Version 3 kept the user index in a database of its own, luser ([len][user][d][seq][item]); it now
 * lives in idem beside the user's records, one leaf written where two were. Upgrading moves each entry
 * across (same value, the tag after the user), then drops luser. */
static int schema_upgrade_from_3(lmdb_store_t *s, MDB_txn *txn)
{
    MDB_dbi luser;
    MDB_cursor *cur;
    int rc = mdb_dbi_open(txn, "luser", 0, &luser);
    if (rc == MDB_NOTFOUND)
        return MDB_SUCCESS;
    if (rc != MDB_SUCCESS || (rc = mdb_cursor_open(txn, luser, &cur)) != MDB_SUCCESS)
        return rc;
    MDB_val key, val;
    uint8_t kbuf[LMDB_MAX_KEY];
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        const uint8_t *k = key.mv_data;
        if (key.mv_size < 2u + k[0] || key.mv_size + 1 > sizeof kbuf) {
            rc = MDB_CORRUPTED;
            break;
        }
        size_t head = 1u + k[0];
        memcpy(kbuf, k, head);
        kbuf[head] = LMDB_LIST_TAG;
        memcpy(kbuf + head + 1, k + head, key.mv_size - head);
        MDB_val moved = {key.mv_size + 1, kbuf};
        if ((rc = lmdb_put(txn, s->idem, &moved, &val, 0)) != MDB_SUCCESS)
            break;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        rc = mdb_drop(txn, luser, 1); /* journal: opening only */
    return rc;
}

/* Checks the schema version; an older one is upgraded in the opening transaction (*build_lists: the
 * store predates the lists, which are built once the kinds are known). */
static int schema_check(lmdb_store_t *s, MDB_txn *txn, bool *build_lists, char *err, size_t errlen)
{
    MDB_val val;
    int rc = lmdb_meta_get(txn, s->meta, "schema", &val);
    char v = rc == MDB_SUCCESS && val.mv_size == 1 ? *(const char *)val.mv_data : 0;
    bool upgrade = v == '1' || v == '2' || v == '3';
    *build_lists = v == '1' || v == '2';
    uint64_t t0 = clock_ms(CLOCK_MONOTONIC);
    if (v == '1')
        rc = schema_upgrade_from_1(txn);
    else if (v == '3')
        rc = schema_upgrade_from_3(s, txn);
    /* a 1 or 2 gets its expiry index tidied by the lists' rebuild (lmdb_txn_lists_rebuild) */
    int trc = rc == MDB_SUCCESS && v == '3' ? lmdb_idem_exp_tidy(s, txn) : STORE_OK;
    if (trc != STORE_OK) {
        snprintf(err, errlen, "schema upgrade: tidying the idempotency records' expiry index failed%s",
                 trc == STORE_FULL ? ": the map is full (raise --map-size)" : "");
        return trc;
    }
    if (rc == MDB_NOTFOUND || (rc == MDB_SUCCESS && upgrade))
        rc = lmdb_meta_put(txn, s->meta, "schema", SCHEMA_VERSION, strlen(SCHEMA_VERSION));
    else if (rc == MDB_SUCCESS &&
             !(val.mv_size == strlen(SCHEMA_VERSION) && memcmp(val.mv_data, SCHEMA_VERSION, val.mv_size) == 0)) {
        snprintf(err, errlen, "the data directory has schema version '%.*s'; this tallyd reads version %s",
                 (int)val.mv_size, (const char *)val.mv_data, SCHEMA_VERSION);
        return STORE_ERROR;
    }
    if (rc != MDB_SUCCESS) {
        snprintf(err, errlen, "schema: %s", mdb_strerror(rc));
        return lmdb_rc(rc);
    }
    if (upgrade) /* (the lists of a 1 or 2 are built afterwards: event=lists-built) */
        log_line("level=info event=schema-upgraded from=%c to=%s ms=%llu", v, SCHEMA_VERSION,
                 (unsigned long long)(clock_ms(CLOCK_MONOTONIC) - t0));
    return STORE_OK;
}

/* Opening in many mode a store kept in one mode: each item's reactors (users whose set is not
 * empty) are the sum of its counts there, written into every counts value in the new shape. */
static int counts_add_reactors(lmdb_store_t *s, MDB_txn *txn)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->counts, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        int64_t counts[KINDS_MAX + 1] = {0};
        span_t item = {key.mv_data, key.mv_size};
        if (lmdb_counts_decode(s, item, &val, counts) != STORE_OK) {
            mdb_cursor_close(cur);
            return STORE_ERROR;
        }
        uint8_t disk[1 + (KINDS_MAX + 1) * sizeof(int64_t)];
        MDB_val nv = {lmdb_counts_encode(s, REACTION_MODE_MANY, counts, disk), disk};
        if ((rc = lmdb_cursor_put(cur, &key, &nv, MDB_CURRENT)) != MDB_SUCCESS)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* True when some row holds several kinds (a store of many mode that one mode cannot read right). */
static int rows_hold_sets(lmdb_store_t *s, MDB_txn *txn, bool *found)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->rows, &cur);
    *found = false;
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS && !*found;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT))
        *found = val.mv_size >= ROW_VALUE_SET_LEN && ((const uint8_t *)val.mv_data)[0] == SET_MARK;
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* The reaction mode: one → many is allowed (the reactors are counted once); many → one is refused
 * while any user holds two kinds on one item. Tools (kinds NULL) take the stored mode. */
static int mode_reconcile(lmdb_store_t *s, MDB_txn *txn, const kinds_t *kinds, char *err, size_t errlen)
{
    MDB_val val;
    int rc = lmdb_meta_get(txn, s->meta, "mode", &val);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
        snprintf(err, errlen, "reading the reaction mode: %s", mdb_strerror(rc));
        return lmdb_rc(rc);
    }
    reaction_mode_t stored = rc == MDB_SUCCESS && val.mv_size == 4 && memcmp(val.mv_data, "many", 4) == 0
                                 ? REACTION_MODE_MANY
                                 : REACTION_MODE_ONE;
    s->mode = kinds ? kinds->mode : stored;
    s->kinds.mode = s->mode;
    if (s->mode == stored && rc == MDB_SUCCESS)
        return STORE_OK;
    if (s->mode == REACTION_MODE_ONE && stored == REACTION_MODE_MANY) {
        bool sets;
        if ((rc = rows_hold_sets(s, txn, &sets)) != STORE_OK) {
            snprintf(err, errlen, "reading the rows failed");
            return rc;
        }
        if (sets) {
            snprintf(err, errlen,
                     "the data directory was used with --reaction-mode many and some users hold several reactions "
                     "on one item: it cannot be opened with --reaction-mode one");
            return STORE_ERROR;
        }
    }
    if (s->mode == REACTION_MODE_MANY && stored == REACTION_MODE_ONE &&
        (rc = counts_add_reactors(s, txn)) != STORE_OK) {
        snprintf(err, errlen, "counting the reactors of each item failed");
        return rc;
    }
    /* the lists of one mode have no "any kind" entries (a page of any kind merges the kinds') */
    s->lists_stale = s->lists_stale || (rc == MDB_SUCCESS && s->mode != stored);
    const char *name = s->mode == REACTION_MODE_MANY ? "many" : "one";
    if ((rc = lmdb_meta_put(txn, s->meta, "mode", name, strlen(name))) != MDB_SUCCESS) {
        snprintf(err, errlen, "writing the reaction mode: %s", mdb_strerror(rc));
        return lmdb_rc(rc);
    }
    return STORE_OK;
}

/* The next log seq follows the last entry and the checkpoint (the log may be pruned to nothing). */
static int next_seq_load(lmdb_store_t *s, MDB_txn *txn)
{
    uint64_t last = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->log, &cur);
    if (rc != MDB_SUCCESS)
        return rc;
    MDB_val key, val;
    rc = mdb_cursor_get(cur, &key, &val, MDB_LAST);
    if (rc == MDB_SUCCESS)
        last = lmdb_get_u64(key.mv_data);
    mdb_cursor_close(cur);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return rc;
    rc = lmdb_meta_get(txn, s->meta, "checkpoint", &val);
    if (rc == MDB_SUCCESS && val.mv_size == 8 && lmdb_get_u64(val.mv_data) > last)
        last = lmdb_get_u64(val.mv_data);
    else if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return rc;
    s->next_seq = last + 1;
    atomic_store(&s->acked_seq, last);
    return MDB_SUCCESS;
}

/* The row filter's thread: every row of one snapshot into the filter. Rows committed after that
 * snapshot were added by store_row_put, which adds from the moment the filter exists. */
typedef struct {
    lmdb_store_t *store;
    uint64_t rows;
    bool stopped;
} filter_fill_t;

static int filter_fill_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    (void)row;
    filter_fill_t *f = arg;
    if (++f->rows % 65536 == 0 && atomic_load_explicit(&f->store->filter_stop, memory_order_relaxed)) {
        f->stopped = true;
        return 1;
    }
    pairfilter_add(&f->store->filter, item, user);
    return 0;
}

static void *filter_fill(void *arg)
{
    filter_fill_t f = {.store = arg};
    pthread_setname_np(pthread_self(), "tally-rowfilter"); /* 15 bytes, Linux's limit */
    store_read_t *snap;
    uint64_t started = mono_ms();
    if (lmdb_read_begin(&f.store->base, &snap) != STORE_OK)
        return NULL;
    int rc = lmdb_read_rows(snap, filter_fill_row, &f);
    lmdb_read_end(snap);
    if (rc == STORE_OK && !f.stopped) { /* the whole table was read */
        atomic_store_explicit(&f.store->filter_ready, true, memory_order_release);
        log_line("level=info event=row-filter-ready rows=%llu ms=%llu", (unsigned long long)f.rows,
                 (unsigned long long)(mono_ms() - started));
    }
    return NULL;
}

static void filter_start(lmdb_store_t *s, uint64_t bytes)
{
    if (!bytes || pairfilter_init(&s->filter, bytes) != 0)
        return; /* no filter: every row is looked up */
    if (pthread_create(&s->filter_thread, NULL, filter_fill, s) != 0) {
        pairfilter_free(&s->filter);
        return;
    }
    s->filter_thread_started = true;
}

int lmdb_open(const char *dir, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
              size_t errlen)
{
    MDB_txn *txn = NULL;
    int rc;
    lmdb_store_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return STORE_ERROR;
    }
    s->journal.fd[0] = s->journal.fd[1] = -1;
    s->dir_lock_fd = -1;
    if (lmdb_overlay_init(&s->overlay) != 0) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERROR;
    }
    if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    uint64_t base = 0;
    int own = lmdb_dir_owner(dir, &s->dir_lock_fd, err, errlen);
    if (own < 0 || lmdb_dir_claim(dir, err, errlen) != 0)
        goto fail;
    /* A tool beside a running tallyd reads what that tallyd committed and must not touch its journal. */
    s->visitor = own == 0;
    if (!s->visitor && (lmdb_journal_init(s, dir, opt->checkpoint_interval_ms, err, errlen) != STORE_OK ||
                        lmdb_journal_restore(s, &base, err, errlen) != STORE_OK))
        goto fail;
    if ((rc = mdb_env_create(&s->env)) != MDB_SUCCESS || (rc = mdb_env_set_userctx(s->env, s)) != MDB_SUCCESS ||
        (rc = mdb_env_set_maxdbs(s->env, MAX_DBS)) != MDB_SUCCESS ||
        (rc = mdb_env_set_maxreaders(s->env, MAX_READERS)) != MDB_SUCCESS ||
        (rc = mdb_env_set_mapsize(s->env, opt->map_size_bytes)) != MDB_SUCCESS) {
        snprintf(err, errlen, "lmdb: %s", mdb_strerror(rc));
        goto fail;
    }
    /* LMDB syncs its own commits while the store opens (there may be no base yet for a power loss
     * to fall back on); once the journal has one it turns them off (lmdb_journal_start). NOTLS so a
     * snapshot belongs to its handle, not its thread (the journal's are released by another). */
    if ((rc = mdb_env_open(s->env, dir, MDB_NOTLS | MDB_NORDAHEAD, 0640)) != MDB_SUCCESS) {
        snprintf(err, errlen, "cannot open store in %s: %s", dir, mdb_strerror(rc));
        goto fail;
    }
    /* A visitor writes nothing, not even while opening (an upgrade it would need fails instead). */
    if ((rc = mdb_txn_begin(s->env, NULL, s->visitor ? MDB_RDONLY : 0, &txn)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "rows", MDB_CREATE, &s->rows)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "log", MDB_CREATE | MDB_INTEGERKEY, &s->log)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "counts", MDB_CREATE, &s->counts)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "idem", MDB_CREATE, &s->idem)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "idem_exp", MDB_CREATE, &s->idem_exp)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "aux", MDB_CREATE, &s->aux)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "litem", MDB_CREATE, &s->litem)) != MDB_SUCCESS) {
        snprintf(err, errlen, "cannot open store databases: %s", mdb_strerror(rc));
        goto fail;
    }
    /* Made after the others (a store of an earlier build gets them here): a visitor, which may not
     * create them, goes without (claims are only read by write transactions). */
    unsigned claims_flags = s->visitor ? 0 : MDB_CREATE;
    if ((rc = mdb_dbi_open(txn, "claims", claims_flags, &s->claims)) == MDB_SUCCESS &&
        (rc = mdb_dbi_open(txn, "claims_exp", claims_flags, &s->claims_exp)) == MDB_SUCCESS)
        s->claims_open = true;
    else if (!(s->visitor && rc == MDB_NOTFOUND)) {
        snprintf(err, errlen, "cannot open store databases: %s", mdb_strerror(rc));
        goto fail;
    }
    /* A change names its database by its place here (the journal's records): new ones go last, so
     * that records of earlier builds replay as they were written. */
    MDB_dbi journalled[] = {s->meta,     s->rows, s->log,   s->counts, s->idem,
                            s->idem_exp, s->aux,  s->litem, s->claims, s->claims_exp};
    memcpy(s->journal.dbs, journalled, sizeof journalled);
    s->journal.ndbs = (int)(sizeof journalled / sizeof journalled[0]) - (s->claims_open ? 0 : 2);
    if (!s->visitor) { /* the journal's records, each its own transaction, before anything else */
        rc = mdb_txn_commit(txn);
        txn = NULL;
        if (rc != MDB_SUCCESS) {
            snprintf(err, errlen, "cannot open store databases: %s", mdb_strerror(rc));
            goto fail;
        }
        if (lmdb_journal_replay(s, base, err, errlen) != STORE_OK)
            goto fail;
        if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn)) != MDB_SUCCESS) {
            snprintf(err, errlen, "initialising the store: %s", mdb_strerror(rc));
            goto fail;
        }
    }
    bool build_lists;
    if (schema_check(s, txn, &build_lists, err, errlen) != STORE_OK ||
        kinds_reconcile(s, txn, kinds, err, errlen) != STORE_OK ||
        mode_reconcile(s, txn, kinds, err, errlen) != STORE_OK)
        goto fail;
    if (build_lists || s->lists_stale) { /* a store made before the lists (or in the other mode): built once */
        uint64_t t0 = clock_ms(CLOCK_MONOTONIC);
        if (lmdb_txn_lists_rebuild(s, txn) != STORE_OK) {
            snprintf(err, errlen, "building the lists (who reacted, a user's reactions) failed");
            goto fail;
        }
        log_line("level=info event=lists-built ms=%llu", (unsigned long long)(clock_ms(CLOCK_MONOTONIC) - t0));
    }
    if ((rc = next_seq_load(s, txn)) != MDB_SUCCESS) {
        snprintf(err, errlen, "reading the log: %s", mdb_strerror(rc));
        goto fail;
    }
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc != MDB_SUCCESS) {
        snprintf(err, errlen, "initialising the store: %s", mdb_strerror(rc));
        goto fail;
    }
    /* A full disk leaves the store open for reads, its writes refused until the journal starts. */
    if (!s->visitor && (rc = lmdb_journal_start(s, err, errlen)) != STORE_OK && rc != STORE_FULL)
        goto fail;
    s->write.store = s;
    filter_start(s, opt->row_filter_bytes);
    s->base.ops = &lmdb_store_ops;
    *out = &s->base;
    return STORE_OK;
fail:
    if (txn)
        mdb_txn_abort(txn);
    s->journal.recording = false; /* nothing to record at a last checkpoint: there is none */
    lmdb_journal_close(s);
    if (s->env)
        mdb_env_close(s->env);
    if (s->dir_lock_fd >= 0)
        close(s->dir_lock_fd);
    lmdb_overlay_free(&s->overlay);
    free(s);
    return STORE_ERROR;
}

const kinds_t *lmdb_kinds(const store_t *s_)
{
    const lmdb_store_t *s = (const lmdb_store_t *)s_;
    return &s->kinds;
}

void lmdb_close(store_t *s_)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    if (!s)
        return;
    assert(!s->write.active);
    if (s->filter_thread_started) {
        atomic_store(&s->filter_stop, true);
        pthread_join(s->filter_thread, NULL);
    }
    pairfilter_free(&s->filter);
    lmdb_epoch_commit(s); /* what the last batches left open (a failure leaves their records to replay) */
    lmdb_journal_close(s);
    mdb_env_close(s->env);
    if (s->dir_lock_fd >= 0)
        close(s->dir_lock_fd); /* last: the next owner finds the store closed */
    lmdb_overlay_free(&s->overlay);
    free(s);
}

int lmdb_backup(store_t *s_, const char *dir)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    return lmdb_rc(mdb_env_copy2(s->env, dir, MDB_CP_COMPACT));
}

/* One process owns the directory: never shared, always ready. */
bool lmdb_shared(const store_t *s_)
{
    (void)s_;
    return false;
}

bool lmdb_ready(store_t *s_)
{
    (void)s_;
    return true;
}

bool lmdb_writes_refused(store_t *s_, char *why, size_t len)
{
    int e = atomic_load(&((lmdb_store_t *)s_)->journal.start_error);
    if (!e)
        return false;
    if (e == ENOSPC || e == EDQUOT || e == MDB_MAP_FULL)
        snprintf(why, len,
                 "no space left in the data directory: the journal could not start (%s); reads are served, "
                 "writes get 503 until space frees",
                 e > 0 ? strerror(e) : mdb_strerror(e));
    else
        snprintf(why, len, "the journal could not start (%s); writes get 503", e > 0 ? strerror(e) : mdb_strerror(e));
    return true;
}
