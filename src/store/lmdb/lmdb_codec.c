/* lmdb_codec.c — the floor of the embedded store: what every file of src/store/lmdb/ calls and
 * that calls none of them. LMDB results as STORE_ codes, the keys and values of each database
 * (decoded and encoded), and the walks the reads and the writes share.
 *
 * Databases:
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
    if (a.len) /* an empty span may have no pointer (memcpy's arguments must not be NULL) */
        memcpy(buf + 1, a.ptr, a.len);
    if (b.len)
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

int lmdb_meta_put(MDB_txn *txn, MDB_dbi meta, const char *name, const void *data, size_t len)
{
    MDB_val key = {strlen(name), (void *)name};
    MDB_val val = {len, (void *)data};
    return lmdb_put(txn, meta, &key, &val, 0);
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
uint8_t lmdb_set_encode(const lmdb_store_t *s, kindset_t set, uint16_t *several)
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

int lmdb_txn_row_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, reaction_row_t *row)
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
int lmdb_corrupt(span_t item, const char *what)
{
    log_line("level=error event=store-corrupt table=counts item=\"%.*s\" error=\"%s\"", (int)item.len, item.ptr, what);
    return STORE_ERROR;
}

/* counts[cfg code] and counts[0], the reactors, from a stored counts value (which may predate kinds
 * added since). A value of one mode holds the kinds only: each user holds at most one, so the
 * reactors are their sum. A value that is not whole counts is corrupt. A negative count is served as
 * it is (recount corrects it); a fold that would leave one negative fails in lmdb_counts_add. */
int lmdb_counts_decode(const lmdb_store_t *s, span_t item, const MDB_val *val, int64_t counts[KINDS_MAX + 1])
{
    const uint8_t *p = val->mv_data;
    bool tagged = val->mv_size % sizeof(int64_t) == 1 && p[0] == COUNTS_REACTORS_TAG;
    size_t skip = tagged ? 1 + sizeof(int64_t) : 0, n = (val->mv_size - skip) / sizeof(int64_t);
    if (val->mv_size < skip || (val->mv_size - skip) % sizeof(int64_t) != 0 || n > KINDS_MAX)
        return lmdb_corrupt(item, "the record's size is not a whole number of counts");
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
size_t lmdb_counts_encode(const lmdb_store_t *s, reaction_mode_t mode, const int64_t counts[KINDS_MAX + 1],
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
        return lmdb_counts_decode(s, item, &val, counts);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
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
    if (!transition_version_unpack(t, lmdb_get_u64(p + 8)))
        return STORE_ERROR;
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

int lmdb_txn_checkpoint_get(const lmdb_store_t *s, MDB_txn *txn, uint64_t *seq)
{
    MDB_val val;
    int rc = lmdb_meta_get(txn, s->meta, "checkpoint", &val);
    *seq = 0;
    if (rc == MDB_SUCCESS && val.mv_size == 8)
        *seq = lmdb_get_u64(val.mv_data);
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
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

/* The records under prefix in txn (a snapshot or the write transaction). */
int lmdb_aux_walk(MDB_txn *txn, MDB_dbi dbi, span_t prefix, store_aux_fn fn, void *arg)
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
