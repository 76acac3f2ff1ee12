/* store_lmdb.c — the embedded store: one directory, LMDB (one writer, lock-free MVCC readers).
 *
 * Databases (DESIGN.md § Keys of the embedded store):
 *   rows      [item_len][item][user]          → [kind u8][version u64]
 *   log       seq (u64, integer key)          → [at_ms u64][version u64][from u8][to u8][item_len u8][item][user]
 *   counts    [item_len][item]                → int64 per stored kind, in stored order (same order as rows)
 *   meta      "schema", "kinds", "checkpoint"
 *   idem      [user_len][user][key]           → [expires_ms][fingerprint][status u16][type u8][has_etag u8][etag
 * u64][body] idem_exp  [expires_ms big-endian][idem key] → ""   (expiry index, swept front to back) Kinds on disk are
 * numbered in the order they were first configured, so that adding a kind never renumbers rows; kind codes are
 * translated at this seam. Integers are in host byte order except the expiry prefix, which must sort. */
#include "store/store.h"

#include <assert.h>
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define SCHEMA_VERSION "1"
#define MAX_DBS 12
#define MAX_READERS 512
#define ROW_VALUE_LEN 9
#define LOG_HEADER_LEN 19
#define IDEM_HEADER_LEN 52
#define KEY_BUF_LEN (1 + 255 + 255)

struct store_read {
    MDB_txn *txn;
    store_t *store;
};

struct store_write {
    MDB_txn *txn;
    store_t *store;
    uint64_t next_seq;
    bool active;
};

struct store {
    MDB_env *env;
    MDB_dbi rows, log, counts, meta, idem, idem_exp, user_items, aux;
    kinds_t kinds;                /* the configured kinds (codes used above the seam) */
    int db_kinds;                 /* kinds known on disk */
    int cfg_to_db[KINDS_MAX + 1]; /* configured code → disk code */
    int db_to_cfg[KINDS_MAX + 1]; /* disk code → configured code */
    uint64_t next_seq;            /* next log sequence number (committed state) */
    struct store_write write;
};

static int map_rc(int rc)
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
static size_t pair_key(char buf[KEY_BUF_LEN], span_t a, span_t b)
{
    assert(a.len <= 255 && b.len <= 255);
    buf[0] = (char)a.len;
    memcpy(buf + 1, a.ptr, a.len);
    memcpy(buf + 1 + a.len, b.ptr, b.len);
    return 1 + a.len + b.len;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* --- opening: schema and kinds --- */

static int meta_get(MDB_txn *txn, MDB_dbi meta, const char *name, MDB_val *val)
{
    MDB_val key = {strlen(name), (void *)name};
    return mdb_get(txn, meta, &key, val);
}

static int meta_put(MDB_txn *txn, MDB_dbi meta, const char *name, const void *data, size_t len)
{
    MDB_val key = {strlen(name), (void *)name};
    MDB_val val = {len, (void *)data};
    return mdb_put(txn, meta, &key, &val, 0);
}

/* Reconciles the configured kinds with the stored ones; writes the list back when kinds were added. */
static int kinds_reconcile(store_t *s, MDB_txn *txn, const kinds_t *kinds, char *err, size_t errlen)
{
    kinds_t stored = {0};
    MDB_val val;
    int rc = meta_get(txn, s->meta, "kinds", &val);
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
        return map_rc(rc);
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
            return map_rc(rc);
        }
    }
    return STORE_OK;
}

static int schema_check(store_t *s, MDB_txn *txn, char *err, size_t errlen)
{
    MDB_val val;
    int rc = meta_get(txn, s->meta, "schema", &val);
    if (rc == MDB_NOTFOUND)
        rc = meta_put(txn, s->meta, "schema", SCHEMA_VERSION, strlen(SCHEMA_VERSION));
    else if (rc == MDB_SUCCESS &&
             !(val.mv_size == strlen(SCHEMA_VERSION) && memcmp(val.mv_data, SCHEMA_VERSION, val.mv_size) == 0)) {
        snprintf(err, errlen, "the data directory has schema version '%.*s'; this tallyd reads version %s",
                 (int)val.mv_size, (const char *)val.mv_data, SCHEMA_VERSION);
        return STORE_ERROR;
    }
    if (rc != MDB_SUCCESS) {
        snprintf(err, errlen, "schema: %s", mdb_strerror(rc));
        return map_rc(rc);
    }
    return STORE_OK;
}

/* The next log seq follows the last entry and the checkpoint (the log may be pruned to nothing). */
static int next_seq_load(store_t *s, MDB_txn *txn)
{
    uint64_t last = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->log, &cur);
    if (rc != MDB_SUCCESS)
        return rc;
    MDB_val key, val;
    rc = mdb_cursor_get(cur, &key, &val, MDB_LAST);
    if (rc == MDB_SUCCESS)
        last = get_u64(key.mv_data);
    mdb_cursor_close(cur);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return rc;
    rc = meta_get(txn, s->meta, "checkpoint", &val);
    if (rc == MDB_SUCCESS && val.mv_size == 8 && get_u64(val.mv_data) > last)
        last = get_u64(val.mv_data);
    else if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return rc;
    s->next_seq = last + 1;
    return MDB_SUCCESS;
}

int store_open(const char *dir, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
               size_t errlen)
{
    MDB_txn *txn = NULL;
    int rc;
    store_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return STORE_ERROR;
    }
    if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    if ((rc = mdb_env_create(&s->env)) != MDB_SUCCESS || (rc = mdb_env_set_maxdbs(s->env, MAX_DBS)) != MDB_SUCCESS ||
        (rc = mdb_env_set_maxreaders(s->env, MAX_READERS)) != MDB_SUCCESS ||
        (rc = mdb_env_set_mapsize(s->env, opt->map_size_bytes)) != MDB_SUCCESS) {
        snprintf(err, errlen, "lmdb: %s", mdb_strerror(rc));
        goto fail;
    }
    /* Durable commits (no NOSYNC flags); NOTLS so a snapshot belongs to its handle, not its thread. */
    if ((rc = mdb_env_open(s->env, dir, MDB_NOTLS | MDB_NORDAHEAD, 0640)) != MDB_SUCCESS) {
        snprintf(err, errlen, "cannot open store in %s: %s", dir, mdb_strerror(rc));
        goto fail;
    }
    if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "rows", MDB_CREATE, &s->rows)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "log", MDB_CREATE | MDB_INTEGERKEY, &s->log)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "counts", MDB_CREATE, &s->counts)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "idem", MDB_CREATE, &s->idem)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "idem_exp", MDB_CREATE, &s->idem_exp)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "user_items", MDB_CREATE, &s->user_items)) != MDB_SUCCESS ||
        (rc = mdb_dbi_open(txn, "aux", MDB_CREATE, &s->aux)) != MDB_SUCCESS) {
        snprintf(err, errlen, "cannot open store databases: %s", mdb_strerror(rc));
        goto fail;
    }
    if (schema_check(s, txn, err, errlen) != STORE_OK || kinds_reconcile(s, txn, kinds, err, errlen) != STORE_OK)
        goto fail;
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
    s->write.store = s;
    *out = s;
    return STORE_OK;
fail:
    if (txn)
        mdb_txn_abort(txn);
    if (s->env)
        mdb_env_close(s->env);
    free(s);
    return STORE_ERROR;
}

const kinds_t *store_kinds(const store_t *s)
{
    return &s->kinds;
}

void store_close(store_t *s)
{
    if (!s)
        return;
    assert(!s->write.active);
    mdb_env_close(s->env);
    free(s);
}

/* --- values --- */

static void row_decode(const store_t *s, const MDB_val *val, reaction_row_t *row)
{
    const uint8_t *p = val->mv_data;
    int db_kind = val->mv_size == ROW_VALUE_LEN ? p[0] : 0;
    row->kind = db_kind <= s->db_kinds ? s->db_to_cfg[db_kind] : KIND_NONE;
    row->version = val->mv_size == ROW_VALUE_LEN ? get_u64(p + 1) : 0;
}

static int row_get(const store_t *s, MDB_txn *txn, span_t item, span_t user, reaction_row_t *row)
{
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {pair_key(kbuf, item, user), kbuf}, val;
    int rc = mdb_get(txn, s->rows, &key, &val);
    *row = (reaction_row_t){KIND_NONE, 0};
    if (rc == MDB_SUCCESS)
        row_decode(s, &val, row);
    return rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

/* counts[cfg code] from a stored counts value (which may predate kinds added since). */
static void counts_decode(const store_t *s, const MDB_val *val, int64_t counts[KINDS_MAX + 1])
{
    size_t n = val->mv_size / sizeof(int64_t);
    for (size_t d = 1; d <= n && d <= (size_t)s->db_kinds; d++) {
        int64_t v;
        memcpy(&v, (const uint8_t *)val->mv_data + (d - 1) * sizeof v, sizeof v);
        counts[s->db_to_cfg[d]] = v;
    }
}

static int counts_get(const store_t *s, MDB_txn *txn, span_t item, int64_t counts[KINDS_MAX + 1])
{
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {pair_key(kbuf, item, (span_t){"", 0}), kbuf}, val;
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    int rc = mdb_get(txn, s->counts, &key, &val);
    if (rc == MDB_SUCCESS)
        counts_decode(s, &val, counts);
    return rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

/* --- snapshots --- */

int store_read_begin(store_t *s, store_read_t **out)
{
    store_read_t *r = malloc(sizeof *r);
    if (!r)
        return STORE_ERROR;
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &r->txn);
    if (rc != MDB_SUCCESS) {
        free(r);
        return map_rc(rc);
    }
    r->store = s;
    *out = r;
    return STORE_OK;
}

void store_read_end(store_read_t *r)
{
    if (!r)
        return;
    mdb_txn_abort(r->txn);
    free(r);
}

int store_read_counts(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1])
{
    return counts_get(r->store, r->txn, item, counts);
}

int store_read_row(store_read_t *r, span_t item, span_t user, reaction_row_t *row)
{
    return row_get(r->store, r->txn, item, user, row);
}

/* --- the write transaction --- */

int store_write_begin(store_t *s, store_write_t **out)
{
    struct store_write *w = &s->write;
    assert(!w->active);
    int rc = mdb_txn_begin(s->env, NULL, 0, &w->txn);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    w->active = true;
    w->next_seq = s->next_seq;
    *out = w;
    return STORE_OK;
}

int store_write_commit(store_write_t *w)
{
    assert(w->active);
    int rc = mdb_txn_commit(w->txn);
    w->active = false;
    if (rc == MDB_SUCCESS)
        w->store->next_seq = w->next_seq;
    return map_rc(rc);
}

void store_write_abort(store_write_t *w)
{
    assert(w->active);
    mdb_txn_abort(w->txn);
    w->active = false;
}

int store_row_get(store_write_t *w, span_t item, span_t user, reaction_row_t *row)
{
    return row_get(w->store, w->txn, item, user, row);
}

int store_row_put(store_write_t *w, span_t item, span_t user, const reaction_row_t *row)
{
    char kbuf[KEY_BUF_LEN];
    uint8_t vbuf[ROW_VALUE_LEN];
    vbuf[0] = (uint8_t)w->store->cfg_to_db[row->kind];
    put_u64(vbuf + 1, row->version);
    MDB_val key = {pair_key(kbuf, item, user), kbuf}, val = {sizeof vbuf, vbuf};
    int rc = mdb_put(w->txn, w->store->rows, &key, &val, 0);
    if (rc == MDB_SUCCESS && row->version == 1) { /* a new row: index it under its user */
        MDB_val ukey = {pair_key(kbuf, user, item), kbuf}, empty = {0, NULL};
        rc = mdb_put(w->txn, w->store->user_items, &ukey, &empty, 0);
    }
    return map_rc(rc);
}

int store_log_append(store_write_t *w, const transition_t *t, uint64_t *seq)
{
    const store_t *s = w->store;
    uint8_t vbuf[LOG_HEADER_LEN + 2 * 255];
    assert(t->item.len <= 255 && t->user.len <= 255);
    put_u64(vbuf, t->at_ms);
    put_u64(vbuf + 8, t->version);
    vbuf[16] = (uint8_t)s->cfg_to_db[t->from];
    vbuf[17] = (uint8_t)s->cfg_to_db[t->to];
    vbuf[18] = (uint8_t)t->item.len;
    memcpy(vbuf + LOG_HEADER_LEN, t->item.ptr, t->item.len);
    memcpy(vbuf + LOG_HEADER_LEN + t->item.len, t->user.ptr, t->user.len);
    uint64_t n = w->next_seq;
    MDB_val key = {sizeof n, &n}, val = {LOG_HEADER_LEN + t->item.len + t->user.len, vbuf};
    int rc = mdb_put(w->txn, s->log, &key, &val, MDB_APPEND);
    if (rc == MDB_SUCCESS) {
        *seq = n;
        w->next_seq = n + 1;
    }
    return map_rc(rc);
}

static int log_decode(const store_t *s, const MDB_val *val, transition_t *t)
{
    const uint8_t *p = val->mv_data;
    if (val->mv_size < LOG_HEADER_LEN || p[16] > s->db_kinds || p[17] > s->db_kinds ||
        val->mv_size < (size_t)LOG_HEADER_LEN + p[18])
        return STORE_ERROR;
    t->at_ms = get_u64(p);
    t->version = get_u64(p + 8);
    t->from = s->db_to_cfg[p[16]];
    t->to = s->db_to_cfg[p[17]];
    t->item = (span_t){(const char *)p + LOG_HEADER_LEN, p[18]};
    t->user = (span_t){(const char *)p + LOG_HEADER_LEN + p[18], val->mv_size - LOG_HEADER_LEN - p[18]};
    return STORE_OK;
}

static int log_scan(const store_t *s, MDB_txn *txn, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->log, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    uint64_t start = after + 1;
    MDB_val key = {sizeof start, &start}, val;
    int result = STORE_OK;
    size_t n = 0;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS && n < limit;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT), n++) {
        transition_t t;
        if ((result = log_decode(s, &val, &t)) != STORE_OK)
            break;
        if (fn(arg, get_u64(key.mv_data), &t) != 0)
            break;
    }
    if (result == STORE_OK && rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        result = map_rc(rc);
    mdb_cursor_close(cur);
    return result;
}

int store_log_scan(store_write_t *w, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    return log_scan(w->store, w->txn, after, limit, fn, arg);
}

int store_counts_add(store_write_t *w, span_t item, const int64_t deltas[KINDS_MAX + 1])
{
    const store_t *s = w->store;
    int64_t counts[KINDS_MAX + 1];
    int rc = counts_get(s, w->txn, item, counts);
    if (rc != STORE_OK)
        return rc;
    int64_t disk[KINDS_MAX];
    for (int d = 1; d <= s->db_kinds; d++) {
        int c = s->db_to_cfg[d];
        counts[c] += deltas[c];
        assert(counts[c] >= 0 && "a count never goes negative");
        disk[d - 1] = counts[c];
    }
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {pair_key(kbuf, item, (span_t){"", 0}), kbuf}, val = {sizeof(int64_t) * (size_t)s->db_kinds, disk};
    return map_rc(mdb_put(w->txn, s->counts, &key, &val, 0));
}

static int checkpoint_get(const store_t *s, MDB_txn *txn, uint64_t *seq)
{
    MDB_val val;
    int rc = meta_get(txn, s->meta, "checkpoint", &val);
    *seq = 0;
    if (rc == MDB_SUCCESS && val.mv_size == 8)
        *seq = get_u64(val.mv_data);
    return rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

int store_checkpoint_get(store_write_t *w, uint64_t *seq)
{
    return checkpoint_get(w->store, w->txn, seq);
}

int store_checkpoint_put(store_write_t *w, uint64_t seq)
{
    return map_rc(meta_put(w->txn, w->store->meta, "checkpoint", &seq, sizeof seq));
}

/* --- idempotency records --- */

static size_t exp_key(char buf[8 + KEY_BUF_LEN], uint64_t expires_ms, const char *idem_key, size_t idem_len)
{
    for (int i = 7; i >= 0; i--, expires_ms >>= 8)
        buf[i] = (char)(expires_ms & 0xff);
    memcpy(buf + 8, idem_key, idem_len);
    return 8 + idem_len;
}

int store_idem_get(store_write_t *w, span_t user, span_t key_text, store_idem_t *rec)
{
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {pair_key(kbuf, user, key_text), kbuf}, val;
    int rc = mdb_get(w->txn, w->store->idem, &key, &val);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    const uint8_t *p = val.mv_data;
    if (val.mv_size < IDEM_HEADER_LEN)
        return STORE_ERROR;
    rec->expires_ms = get_u64(p);
    memcpy(rec->fingerprint, p + 8, FINGERPRINT_LEN);
    memcpy(&rec->status, p + 40, sizeof rec->status);
    rec->type = p[42];
    rec->has_etag = p[43];
    rec->etag_version = get_u64(p + 44);
    rec->body = (span_t){(const char *)p + IDEM_HEADER_LEN, val.mv_size - IDEM_HEADER_LEN};
    return STORE_OK;
}

int store_idem_put(store_write_t *w, span_t user, span_t key_text, const store_idem_t *rec)
{
    const store_t *s = w->store;
    char kbuf[KEY_BUF_LEN], ebuf[8 + KEY_BUF_LEN];
    MDB_val key = {pair_key(kbuf, user, key_text), kbuf}, val;
    int rc = mdb_get(w->txn, s->idem, &key, &val);
    if (rc == MDB_SUCCESS && val.mv_size >= 8) { /* replacing an expired record: drop its index entry */
        MDB_val old = {exp_key(ebuf, get_u64(val.mv_data), kbuf, key.mv_size), ebuf};
        rc = mdb_del(w->txn, s->idem_exp, &old, NULL);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            return map_rc(rc);
    } else if (rc != MDB_NOTFOUND && rc != MDB_SUCCESS) {
        return map_rc(rc);
    }
    val.mv_size = IDEM_HEADER_LEN + rec->body.len;
    if ((rc = mdb_put(w->txn, s->idem, &key, &val, MDB_RESERVE)) != MDB_SUCCESS)
        return map_rc(rc);
    uint8_t *p = val.mv_data;
    put_u64(p, rec->expires_ms);
    memcpy(p + 8, rec->fingerprint, FINGERPRINT_LEN);
    memcpy(p + 40, &rec->status, sizeof rec->status);
    p[42] = rec->type;
    p[43] = rec->has_etag;
    put_u64(p + 44, rec->etag_version);
    memcpy(p + IDEM_HEADER_LEN, rec->body.ptr, rec->body.len);
    MDB_val ekey = {exp_key(ebuf, rec->expires_ms, kbuf, key.mv_size), ebuf}, empty = {0, NULL};
    return map_rc(mdb_put(w->txn, s->idem_exp, &ekey, &empty, 0));
}

int store_idem_sweep(store_write_t *w, uint64_t now_ms, size_t limit, size_t *deleted)
{
    const store_t *s = w->store;
    MDB_cursor *cur;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, s->idem_exp, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    MDB_val ekey, eval;
    /* Always take the first entry: the index is in expiry order and each pass deletes it. */
    while (*deleted < limit && (rc = mdb_cursor_get(cur, &ekey, &eval, MDB_FIRST)) == MDB_SUCCESS) {
        const uint8_t *p = ekey.mv_data;
        if (ekey.mv_size < 9)
            break;
        uint64_t expires = 0;
        for (int i = 0; i < 8; i++)
            expires = expires << 8 | p[i];
        if (expires > now_ms)
            break;
        MDB_val key = {ekey.mv_size - 8, (void *)(p + 8)}, val;
        rc = mdb_get(w->txn, s->idem, &key, &val);
        if (rc == MDB_SUCCESS && val.mv_size >= 8 && get_u64(val.mv_data) == expires)
            rc = mdb_del(w->txn, s->idem, &key, NULL);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS)
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

/* --- snapshot views for recount, the change feed and statistics --- */

int store_read_checkpoint(store_read_t *r, uint64_t *seq)
{
    return checkpoint_get(r->store, r->txn, seq);
}

int store_read_log(store_read_t *r, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    return log_scan(r->store, r->txn, after, limit, fn, arg);
}

int store_read_log_bounds(store_read_t *r, uint64_t *first, uint64_t *last)
{
    MDB_cursor *cur;
    MDB_val key, val;
    *first = *last = 0;
    int rc = mdb_cursor_open(r->txn, r->store->log, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    if ((rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST)) == MDB_SUCCESS) {
        *first = get_u64(key.mv_data);
        if ((rc = mdb_cursor_get(cur, &key, &val, MDB_LAST)) == MDB_SUCCESS)
            *last = get_u64(key.mv_data);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

int store_read_tally_item(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1])
{
    const store_t *s = r->store;
    char prefix[KEY_BUF_LEN];
    size_t plen = pair_key(prefix, item, (span_t){"", 0});
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, s->rows, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    MDB_val key = {plen, prefix}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size <= plen || memcmp(key.mv_data, prefix, plen) != 0)
            break;
        reaction_row_t row;
        row_decode(s, &val, &row);
        counts[row.kind]++;
    }
    mdb_cursor_close(cur);
    counts[KIND_NONE] = 0;
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

/* The item of a rows or counts key ([len][item]…), or false when the key is malformed. */
static bool key_item(const MDB_val *key, span_t *item)
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
    size_t n = pair_key(buf, after, (span_t){"", 0});
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

int store_read_items(store_read_t *r, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited)
{
    const store_t *s = r->store;
    MDB_cursor *rows = NULL, *counts = NULL;
    *visited = 0;
    int rc = mdb_cursor_open(r->txn, s->rows, &rows);
    if (rc == MDB_SUCCESS)
        rc = mdb_cursor_open(r->txn, s->counts, &counts);
    if (rc != MDB_SUCCESS) {
        if (rows)
            mdb_cursor_close(rows);
        return map_rc(rc);
    }
    MDB_val rkey, rval, ckey, cval;
    int rrc = seek_after_item(rows, after, &rkey, &rval);
    int crc = seek_after_item(counts, after, &ckey, &cval);
    int result = STORE_OK;
    while (*visited < limit && (rrc == MDB_SUCCESS || crc == MDB_SUCCESS)) {
        span_t ritem = {0}, citem = {0};
        if ((rrc == MDB_SUCCESS && !key_item(&rkey, &ritem)) || (crc == MDB_SUCCESS && !key_item(&ckey, &citem))) {
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
        result = map_rc(rrc != MDB_SUCCESS && rrc != MDB_NOTFOUND ? rrc : crc);
    mdb_cursor_close(rows);
    mdb_cursor_close(counts);
    return result;
}

int store_stats(store_t *s, store_stats_t *st)
{
    MDB_txn *txn;
    MDB_stat ms;
    MDB_envinfo info;
    *st = (store_stats_t){0};
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    if ((rc = mdb_stat(txn, s->rows, &ms)) == MDB_SUCCESS)
        st->rows = ms.ms_entries;
    if (rc == MDB_SUCCESS && (rc = mdb_stat(txn, s->counts, &ms)) == MDB_SUCCESS)
        st->items = ms.ms_entries;
    if (rc == MDB_SUCCESS && (rc = mdb_stat(txn, s->log, &ms)) == MDB_SUCCESS) {
        st->log_entries = ms.ms_entries;
        st->log_bytes = (uint64_t)(ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages) * ms.ms_psize;
    }
    if (rc == MDB_SUCCESS && (rc = mdb_stat(txn, s->idem, &ms)) == MDB_SUCCESS)
        st->idem_records = ms.ms_entries;
    if (rc == MDB_SUCCESS && (rc = mdb_env_info(s->env, &info)) == MDB_SUCCESS && mdb_env_stat(s->env, &ms) == 0)
        st->used_bytes = (uint64_t)(info.me_last_pgno + 1) * ms.ms_psize;
    if (rc == MDB_SUCCESS)
        rc = checkpoint_get(s, txn, &st->checkpoint) == STORE_OK ? MDB_SUCCESS : MDB_PANIC;
    mdb_txn_abort(txn);
    return map_rc(rc);
}

int store_backup(store_t *s, const char *dir)
{
    return map_rc(mdb_env_copy2(s->env, dir, MDB_CP_COMPACT));
}

int store_log_prune(store_write_t *w, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted)
{
    MDB_cursor *cur;
    MDB_val key, val;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, w->store->log, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    while (*deleted < limit && (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST)) == MDB_SUCCESS) {
        if (get_u64(key.mv_data) > upto_seq || val.mv_size < 8 || get_u64(val.mv_data) >= before_ms)
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS)
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

/* --- walks over one item's or one user's rows, for deletion and erasure (writer) --- */

/* Calls fn(arg, rest) for the keys of dbi that start with [len][prefix] and sort after
 * [len][prefix][after], at most limit; rest is the key past the prefix. */
static int prefix_walk(MDB_txn *txn, MDB_dbi dbi, span_t prefix, span_t after, size_t limit,
                       int (*fn)(void *arg, span_t rest), void *arg, size_t *visited)
{
    char start[KEY_BUF_LEN + 1], pbuf[KEY_BUF_LEN];
    size_t plen = pair_key(pbuf, prefix, (span_t){"", 0});
    size_t slen = pair_key(start, prefix, after);
    if (after.len)
        start[slen++] = '\0'; /* strictly after: the smallest key greater than prefix+after */
    MDB_cursor *cur;
    *visited = 0;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
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
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

int store_item_users(store_write_t *w, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg,
                     size_t *visited)
{
    return prefix_walk(w->txn, w->store->rows, item, after, limit, fn, arg, visited);
}

int store_user_items(store_write_t *w, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                     size_t *visited)
{
    return prefix_walk(w->txn, w->store->user_items, user, after, limit, fn, arg, visited);
}

int store_idem_delete_user(store_write_t *w, span_t user, size_t limit, size_t *deleted)
{
    char pbuf[KEY_BUF_LEN];
    size_t plen = pair_key(pbuf, user, (span_t){"", 0});
    MDB_cursor *cur;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, w->store->idem, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    while (*deleted < limit) {
        MDB_val key = {plen, pbuf}, val;
        if ((rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE)) != MDB_SUCCESS)
            break;
        if (key.mv_size < plen || memcmp(key.mv_data, pbuf, plen) != 0)
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS) /* its expiry entry goes with the sweep */
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

int store_read_rows(store_read_t *r, store_row_fn fn, void *arg)
{
    const store_t *s = r->store;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, s->rows, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    MDB_val key, val;
    int result = STORE_OK;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        span_t item;
        if (!key_item(&key, &item)) {
            result = STORE_ERROR;
            break;
        }
        span_t user = {item.ptr + item.len, key.mv_size - 1 - item.len};
        reaction_row_t row;
        row_decode(s, &val, &row);
        if (fn(arg, item, user, &row) != 0)
            break;
    }
    if (result == STORE_OK && rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        result = map_rc(rc);
    mdb_cursor_close(cur);
    return result;
}

/* --- the log by time, and auxiliary records --- */

static int log_at(const store_t *s, MDB_txn *txn, uint64_t seq, uint64_t *at_ms)
{
    MDB_val key = {sizeof seq, &seq}, val;
    int rc = mdb_get(txn, s->log, &key, &val);
    if (rc == MDB_SUCCESS && val.mv_size >= 8)
        *at_ms = get_u64(val.mv_data);
    return rc;
}

int store_read_log_seek(store_read_t *r, uint64_t at_ms, uint64_t *seq)
{
    uint64_t first, last, at = 0;
    int rc = store_read_log_bounds(r, &first, &last);
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
            return map_rc(rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc); /* the log has no holes */
        if (at < at_ms)
            lo = mid + 1;
        else
            hi = mid;
    }
    *seq = lo;
    return STORE_OK;
}

int store_aux_put(store_write_t *w, span_t key, span_t value)
{
    MDB_val k = {key.len, (void *)key.ptr}, v = {value.len, (void *)value.ptr};
    return map_rc(mdb_put(w->txn, w->store->aux, &k, &v, 0));
}

int store_aux_delete_range(store_write_t *w, span_t from, span_t to)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(w->txn, w->store->aux, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    MDB_val key = {from.len, (void *)from.ptr}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_GET_CURRENT)) {
        size_t n = key.mv_size < to.len ? key.mv_size : to.len;
        int cmp = memcmp(key.mv_data, to.ptr, n);
        if (cmp > 0 || (cmp == 0 && key.mv_size >= to.len))
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}

int store_read_aux(store_read_t *r, span_t prefix, store_aux_fn fn, void *arg)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, r->store->aux, &cur);
    if (rc != MDB_SUCCESS)
        return map_rc(rc);
    MDB_val key = {prefix.len, (void *)prefix.ptr}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size < prefix.len || memcmp(key.mv_data, prefix.ptr, prefix.len) != 0)
            break;
        if (fn(arg, (span_t){key.mv_data, key.mv_size}, (span_t){val.mv_data, val.mv_size}) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : map_rc(rc);
}
