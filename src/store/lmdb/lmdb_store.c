/* store_lmdb.c — the embedded store: one directory, LMDB (one writer, lock-free MVCC readers). This file
 * opens the store (schema, kinds) and holds snapshots, the write transaction, rows, the log, counts and
 * the checkpoint; store_lmdb_idem.c and store_lmdb_views.c hold the rest.
 *
 * Databases (DESIGN.md § Keys of the embedded store):
 *   rows        [item_len][item][user]  → [kind u8][version u64]
 *   log         seq (u64 integer key)   → [at_ms u64][version u64][from u8][to u8][item_len u8][item][user]
 *   counts      [item_len][item]        → int64 per stored kind, in stored order (the order of rows)
 *   meta        "schema", "kinds", "checkpoint"
 *   idem        [user_len][user][key]   → [expires_ms][fingerprint][status][type][has_etag][etag][body]
 *               and, under LMDB_LIST_TAG after [user_len][user], the user index (lmdb_lists.c)
 *   idem_exp    [expires_ms BE][idem key] → "" (expiry index, swept front to back; one per record)
 *   aux         text key                → bytes (other modules' state: trending's summaries)
 *   litem                               the item index, kept by the fold with the user index; a row's
 *                                       value may end with the lists' record of its pair
 * Kinds on disk are numbered in the order they were first configured, so adding a kind never renumbers
 * rows; kind codes are translated at this seam. Integers are in host byte order, except the expiry
 * prefix, which must sort. */
#include "store/lmdb/lmdb.h"
#include "store/lmdb/lmdb_internal.h"

#include "core/clock.h"
#include "core/journalrec.h"
#include "core/log.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

int lmdb_rc(int rc)
{
    switch (rc) {
    case MDB_SUCCESS:
        return STORE_OK;
    case MDB_NOTFOUND:
        return STORE_NOTFOUND;
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
        return STORE_FULL;
    default:
        return STORE_ERROR;
    }
}

/* [len u8][a][b] — the key of a row (item, user) or of an idempotency record (user, key). */
size_t lmdb_pair_key(char buf[KEY_BUF_LEN], span_t a, span_t b)
{
    assert(a.len <= 255 && b.len <= 255);
    buf[0] = (char)a.len;
    memcpy(buf + 1, a.ptr, a.len);
    memcpy(buf + 1 + a.len, b.ptr, b.len);
    return 1 + a.len + b.len;
}

int lmdb_delete_matching(MDB_txn *txn, MDB_dbi db, lmdb_match_fn match, void *arg)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, db, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key, val;
    char kbuf[LMDB_MAX_KEY];
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;) {
        bool del = false;
        if ((rc = match(arg, &key, &val, &del)) != MDB_SUCCESS)
            break;
        if (!del) {
            rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
            continue;
        }
        /* seek again from a copy of the key rather than step: once the database's last record is
         * deleted the cursor has no current record */
        if (key.mv_size > sizeof kbuf) {
            rc = MDB_BAD_VALSIZE;
            break;
        }
        memcpy(kbuf, key.mv_data, key.mv_size);
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
        key = (MDB_val){key.mv_size, kbuf};
        rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* --- opening: schema and kinds --- */

int lmdb_meta_get(MDB_txn *txn, MDB_dbi meta, const char *name, MDB_val *val)
{
    MDB_val key = {strlen(name), (void *)name};
    return mdb_get(txn, meta, &key, val);
}

static int meta_put(MDB_txn *txn, MDB_dbi meta, const char *name, const void *data, size_t len)
{
    MDB_val key = {strlen(name), (void *)name};
    MDB_val val = {len, (void *)data};
    return lmdb_put(txn, meta, &key, &val, 0);
}

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
        rc = meta_put(txn, s->meta, "kinds", list, n);
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
        rc = meta_put(txn, s->meta, "schema", SCHEMA_VERSION, strlen(SCHEMA_VERSION));
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

static int counts_decode(const lmdb_store_t *s, span_t item, const MDB_val *val, int64_t counts[KINDS_MAX + 1]);
static size_t counts_encode(const lmdb_store_t *s, reaction_mode_t mode, const int64_t counts[KINDS_MAX + 1],
                            uint8_t buf[1 + (KINDS_MAX + 1) * sizeof(int64_t)]);

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
        if (counts_decode(s, item, &val, counts) != STORE_OK) {
            mdb_cursor_close(cur);
            return STORE_ERROR;
        }
        uint8_t disk[1 + (KINDS_MAX + 1) * sizeof(int64_t)];
        MDB_val nv = {counts_encode(s, REACTION_MODE_MANY, counts, disk), disk};
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
    if ((rc = meta_put(txn, s->meta, "mode", name, strlen(name))) != MDB_SUCCESS) {
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
    MDB_dbi journalled[] = {s->meta, s->rows, s->log, s->counts, s->idem, s->idem_exp, s->aux, s->litem};
    memcpy(s->journal.dbs, journalled, sizeof journalled);
    s->journal.ndbs = (int)(sizeof journalled / sizeof journalled[0]);
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

static int epoch_commit(lmdb_store_t *s);

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
    epoch_commit(s); /* what the last batches left open (a failure leaves their records to replay) */
    lmdb_journal_close(s);
    mdb_env_close(s->env);
    if (s->dir_lock_fd >= 0)
        close(s->dir_lock_fd); /* last: the next owner finds the store closed */
    lmdb_overlay_free(&s->overlay);
    free(s);
}

/* --- values --- */

/* A set of configured codes as a set of disk codes, and back (bit d for code d in both). */
uint32_t lmdb_set_to_db(const lmdb_store_t *s, kindset_t set)
{
    uint32_t db = 0;
    for (; set; set &= set - 1)
        db |= 1u << s->cfg_to_db[__builtin_ctz(set)];
    return db;
}

kindset_t lmdb_set_from_db(const lmdb_store_t *s, uint32_t db)
{
    kindset_t set = KINDSET_EMPTY;
    for (; db; db &= db - 1) {
        int d = __builtin_ctz(db);
        if (d >= 1 && d <= s->db_kinds)
            set |= kindset_of(s->db_to_cfg[d]);
    }
    return set;
}

/* Writes a set as one disk code when it has at most one kind (the one-mode row), else SET_MARK;
 * the u16 of disk codes goes to *several. Returns the first byte. */
static uint8_t set_encode(const lmdb_store_t *s, kindset_t set, uint16_t *several)
{
    uint32_t db = lmdb_set_to_db(s, set);
    *several = (uint16_t)(db >> 1);
    return kindset_size(set) <= 1 ? (uint8_t)(db ? __builtin_ctz(db) : 0) : SET_MARK;
}

size_t lmdb_row_base_len(const MDB_val *val)
{
    const uint8_t *p = val->mv_data;
    size_t len = val->mv_size && p[0] == SET_MARK ? ROW_VALUE_SET_LEN : ROW_VALUE_LEN;
    return val->mv_size >= len ? len : 0;
}

void lmdb_row_decode(const lmdb_store_t *s, const MDB_val *val, reaction_row_t *row)
{
    const uint8_t *p = val->mv_data;
    size_t base = lmdb_row_base_len(val);
    *row = (reaction_row_t){KINDSET_EMPTY, 0};
    if (base == ROW_VALUE_LEN && p[0] != SET_MARK) {
        row->set = p[0] <= s->db_kinds ? lmdb_set_from_db(s, p[0] ? 1u << p[0] : 0) : KINDSET_EMPTY;
        row->version = lmdb_get_u64(p + 1);
    } else if (base == ROW_VALUE_SET_LEN) {
        row->set = lmdb_set_from_db(s, (uint32_t)lmdb_get_u16(p + 1) << 1);
        row->version = lmdb_get_u64(p + 3);
    }
}

static int row_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, reaction_row_t *row)
{
    *row = (reaction_row_t){KIND_NONE, 0};
    if (atomic_load_explicit(&s->filter_ready, memory_order_acquire) && !pairfilter_may_contain(&s->filter, item, user))
        return STORE_OK; /* certainly no row */
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf}, val;
    int rc = mdb_get(txn, s->rows, &key, &val);
    if (rc == MDB_SUCCESS)
        lmdb_row_decode(s, &val, row);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* Bad bytes on the disk are an error of the store, not of the program: logged, and STORE_ERROR
 * (the transaction is void, as SQLite's SQLITE_CORRUPT), never an assert that stops the server. */
static int store_corrupt(span_t item, const char *what)
{
    log_line("level=error event=store-corrupt table=counts item=\"%.*s\" error=\"%s\"", (int)item.len, item.ptr, what);
    return STORE_ERROR;
}

/* counts[cfg code] and counts[0], the reactors, from a stored counts value (which may predate kinds
 * added since). A value of one mode holds the kinds only: each user holds at most one, so the
 * reactors are their sum. A value that is not whole counts is corrupt. A negative count is served as
 * it is (recount corrects it); a fold that would leave one negative fails in lmdb_counts_add. */
static int counts_decode(const lmdb_store_t *s, span_t item, const MDB_val *val, int64_t counts[KINDS_MAX + 1])
{
    const uint8_t *p = val->mv_data;
    bool tagged = val->mv_size % sizeof(int64_t) == 1 && p[0] == COUNTS_REACTORS_TAG;
    size_t skip = tagged ? 1 + sizeof(int64_t) : 0, n = (val->mv_size - skip) / sizeof(int64_t);
    if (val->mv_size < skip || (val->mv_size - skip) % sizeof(int64_t) != 0 || n > KINDS_MAX)
        return store_corrupt(item, "the record's size is not a whole number of counts");
    int64_t sum = 0;
    for (size_t d = 1; d <= n && d <= (size_t)s->db_kinds; d++) {
        int64_t v;
        memcpy(&v, p + skip + (d - 1) * sizeof v, sizeof v);
        counts[s->db_to_cfg[d]] = v;
        sum += v;
    }
    if (tagged)
        memcpy(&counts[KIND_NONE], p + 1, sizeof(int64_t));
    else
        counts[KIND_NONE] = sum;
    return STORE_OK;
}

/* The value of counts (cfg codes; [0] the reactors) as the mode keeps it into buf; its length. */
static size_t counts_encode(const lmdb_store_t *s, reaction_mode_t mode, const int64_t counts[KINDS_MAX + 1],
                            uint8_t buf[1 + (KINDS_MAX + 1) * sizeof(int64_t)])
{
    size_t off = 0;
    if (mode == REACTION_MODE_MANY) {
        buf[0] = COUNTS_REACTORS_TAG;
        memcpy(buf + 1, &counts[KIND_NONE], sizeof(int64_t));
        off = 1 + sizeof(int64_t);
    }
    for (int d = 1; d <= s->db_kinds; d++)
        memcpy(buf + off + (size_t)(d - 1) * sizeof(int64_t), &counts[s->db_to_cfg[d]], sizeof(int64_t));
    return off + (size_t)s->db_kinds * sizeof(int64_t);
}

int lmdb_counts_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, int64_t counts[KINDS_MAX + 1])
{
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, item, (span_t){"", 0}), kbuf}, val;
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    int rc = mdb_get(txn, s->counts, &key, &val);
    if (rc == MDB_SUCCESS)
        return counts_decode(s, item, &val, counts);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

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
            return row_get(r->store, r->txn, item, user, row);
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
static int epoch_commit(lmdb_store_t *s)
{
    if (!s->epoch)
        return MDB_SUCCESS;
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

static void lmdb_write_defer(store_write_t *w_, bool (*more)(void *arg), void *arg)
{
    lmdb_store_t *s = ((lmdb_write_t *)w_)->store;
    s->defer = more;
    s->defer_arg = arg;
}

static bool lmdb_writes_refused(store_t *s_, char *why, size_t len)
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

static uint64_t lmdb_read_acknowledged(store_read_t *r_)
{
    return atomic_load(&((lmdb_read_t *)r_)->store->acked_seq);
}

static bool lmdb_pending(const store_t *s_)
{
    return ((const lmdb_store_t *)s_)->epoch != NULL;
}

static int lmdb_flush(store_t *s_)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    assert(!s->write.active);
    return lmdb_rc(epoch_commit(s));
}

int lmdb_write_begin(store_t *s_, store_write_t **out)
{
    lmdb_store_t *s = (lmdb_store_t *)s_;
    struct lmdb_write *w = &s->write;
    assert(!w->active);
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
                fprintf(stderr, "level=error event=write-refused reason=\"%s\"\n", err);
            return rc;
        }
    }
    int rc = mdb_txn_begin(s->env, s->epoch, 0, &w->txn); /* a child of the open epoch's, if any */
    if (rc != MDB_SUCCESS) {
        epoch_commit(s); /* what the epoch holds is acknowledged: seen now, whatever this batch does */
        return lmdb_rc(rc);
    }
    w->active = true;
    w->next_seq = s->next_seq;
    lmdb_journal_txn_reset(s);
    w->base.ops = &lmdb_store_ops;
    *out = &w->base;
    return STORE_OK;
}

int lmdb_write_commit(store_write_t *w_)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
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
        epoch_commit(s);
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
        epoch_commit(s);
    else if (rc == MDB_SUCCESS && !s->epoch)
        lmdb_journal_maybe_checkpoint(s);
    return lmdb_rc(rc);
}

void lmdb_write_abort(store_write_t *w_)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    assert(w->active);
    mdb_txn_abort(w->txn);
    lmdb_journal_txn_reset(w->store);
    w->active = false;
    w->store->defer = NULL;
    epoch_commit(w->store); /* the batches before this one are acknowledged: seen now */
}

int lmdb_row_get(store_write_t *w_, span_t item, span_t user, reaction_row_t *row)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    return row_get(w->store, w->txn, item, user, row);
}

/* The row's value: its reaction part, then the lists' record the stored value ends with (kept: the
 * writer changes the reaction, the fold the record). */
int lmdb_row_put(store_write_t *w_, span_t item, span_t user, const reaction_row_t *row)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    char kbuf[KEY_BUF_LEN];
    uint8_t vbuf[ROW_VALUE_SET_LEN + LMDB_LIST_RECORD_MAX];
    uint16_t several;
    vbuf[0] = set_encode(w->store, row->set, &several);
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
            return store_corrupt(item, "a row value of a length no row has");
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
    const lmdb_store_t *s = w->store;
    uint8_t vbuf[LOG_HEADER_LEN + LOG_SETS_LEN + 2 * 255];
    assert(t->item.len <= 255 && t->user.len <= 255);
    lmdb_put_u64(vbuf, t->at_ms);
    lmdb_put_u64(vbuf + 8, t->version);
    uint16_t from, to;
    vbuf[16] = set_encode(s, t->from, &from);
    vbuf[17] = set_encode(s, t->to, &to);
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
    uint64_t got;
    if (seq < w->next_seq)
        return STORE_ERROR; /* not above the log's positions */
    w->next_seq = seq;
    return lmdb_log_append(w_, t, &got);
}

static int log_decode(const lmdb_store_t *s, const MDB_val *val, transition_t *t)
{
    const uint8_t *p = val->mv_data;
    if (val->mv_size < LOG_HEADER_LEN)
        return STORE_ERROR;
    bool sets = p[16] == SET_MARK && p[17] == SET_MARK;
    size_t head = LOG_HEADER_LEN + (sets ? LOG_SETS_LEN : 0);
    if ((!sets && (p[16] > s->db_kinds || p[17] > s->db_kinds)) || val->mv_size < head + p[18])
        return STORE_ERROR;
    t->at_ms = lmdb_get_u64(p);
    t->version = lmdb_get_u64(p + 8);
    if (sets) {
        t->from = lmdb_set_from_db(s, (uint32_t)lmdb_get_u16(p + LOG_HEADER_LEN) << 1);
        t->to = lmdb_set_from_db(s, (uint32_t)lmdb_get_u16(p + LOG_HEADER_LEN + 2) << 1);
    } else {
        t->from = kindset_of(s->db_to_cfg[p[16]]);
        t->to = kindset_of(s->db_to_cfg[p[17]]);
    }
    t->item = (span_t){(const char *)p + head, p[18]};
    t->user = (span_t){(const char *)p + head + p[18], val->mv_size - head - p[18]};
    return STORE_OK;
}

int lmdb_txn_log_scan(const lmdb_store_t *s, MDB_txn *txn, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->log, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    uint64_t start = after + 1;
    MDB_val key = {sizeof start, &start}, val;
    int result = STORE_OK;
    size_t n = 0;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS && n < limit;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT), n++) {
        transition_t t;
        if ((result = log_decode(s, &val, &t)) != STORE_OK)
            break;
        if (fn(arg, lmdb_get_u64(key.mv_data), &t) != 0)
            break;
    }
    if (result == STORE_OK && rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        result = lmdb_rc(rc);
    mdb_cursor_close(cur);
    return result;
}

int lmdb_log_scan(store_write_t *w_, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    return lmdb_txn_log_scan(w->store, w->txn, after, limit, fn, arg);
}

int lmdb_counts_add(store_write_t *w_, span_t item, const int64_t deltas[KINDS_MAX + 1])
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    const lmdb_store_t *s = w->store;
    int64_t counts[KINDS_MAX + 1];
    int rc = lmdb_counts_get(s, w->txn, item, counts);
    if (rc != STORE_OK)
        return rc;
    for (int c = s->mode == REACTION_MODE_MANY ? KIND_NONE : 1; c <= s->kinds.count; c++) { /* [0]: the reactors */
        /* A count below zero after the fold means the stored counts and the log disagree: the data
         * on the disk is wrong (the fold of the program's own transitions cannot do it). */
        if (__builtin_add_overflow(counts[c], deltas[c], &counts[c]) || counts[c] < 0)
            return store_corrupt(item, "the stored count and the log disagree: the fold would make it negative");
    }
    char kbuf[KEY_BUF_LEN];
    uint8_t disk[1 + (KINDS_MAX + 1) * sizeof(int64_t)];
    MDB_val key = {lmdb_pair_key(kbuf, item, (span_t){"", 0}), kbuf},
            val = {counts_encode(s, s->mode, counts, disk), disk};
    return lmdb_rc(lmdb_put(w->txn, s->counts, &key, &val, 0));
}

int lmdb_txn_checkpoint_get(const lmdb_store_t *s, MDB_txn *txn, uint64_t *seq)
{
    MDB_val val;
    int rc = lmdb_meta_get(txn, s->meta, "checkpoint", &val);
    *seq = 0;
    if (rc == MDB_SUCCESS && val.mv_size == 8)
        *seq = lmdb_get_u64(val.mv_data);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

int lmdb_checkpoint_get(store_write_t *w_, uint64_t *seq)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    return lmdb_txn_checkpoint_get(w->store, w->txn, seq);
}

int lmdb_checkpoint_put(store_write_t *w_, uint64_t seq)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    return lmdb_rc(meta_put(w->txn, w->store->meta, "checkpoint", &seq, sizeof seq));
}

const store_ops_t lmdb_store_ops = {
    .close = lmdb_close,
    .writes_refused = lmdb_writes_refused,
    .kinds = lmdb_kinds,
    .read_begin = lmdb_read_begin,
    .read_end = lmdb_read_end,
    .read_counts = lmdb_read_counts,
    .read_row = lmdb_read_row,
    .write_begin = lmdb_write_begin,
    .write_commit = lmdb_write_commit,
    .write_abort = lmdb_write_abort,
    .write_defer = lmdb_write_defer,
    .pending = lmdb_pending,
    .flush = lmdb_flush,
    .row_get = lmdb_row_get,
    .row_put = lmdb_row_put,
    .log_append = lmdb_log_append,
    .log_put = lmdb_log_put,
    .log_scan = lmdb_log_scan,
    .counts_add = lmdb_counts_add,
    .checkpoint_get = lmdb_checkpoint_get,
    .checkpoint_put = lmdb_checkpoint_put,
    .idem_get = lmdb_idem_get,
    .idem_put = lmdb_idem_put,
    .idem_sweep = lmdb_idem_sweep,
    .read_checkpoint = lmdb_read_checkpoint,
    .read_log = lmdb_read_log,
    .read_log_bounds = lmdb_read_log_bounds,
    .read_acknowledged = lmdb_read_acknowledged,
    .read_tally_item = lmdb_read_tally_item,
    .read_items = lmdb_read_items,
    .stats = lmdb_stats,
    .backup = lmdb_backup,
    .item_users = lmdb_item_users,
    .user_items = lmdb_user_items,
    .read_idem = lmdb_read_idem,
    .idem_delete_user = lmdb_idem_delete_user,
    .read_rows = lmdb_read_rows,
    .export_page = lmdb_export_page,
    .read_log_seek = lmdb_read_log_seek,
    .aux_put = lmdb_aux_put,
    .aux_delete_range = lmdb_aux_delete_range,
    .read_aux = lmdb_read_aux,
    .aux_read_locked = lmdb_aux_read_locked,
    .log_prune = lmdb_log_prune,
    .list_apply = lmdb_list_apply,
    .lists_rebuild = lmdb_lists_rebuild,
    .read_list = lmdb_read_list,
    .read_lists_check = lmdb_read_lists_check,
};
