/* lmdb_lists.c — the embedded store's lists: who reacted to an item, what a user reacted to.
 *
 * Databases (kept by the fold, in its transaction; positions are log seqs):
 *   litem  [len][item][d u8][seq BE][user] → [at_ms u64][set u32]  (d: disk code; 0 = any kind)
 *   idem   [len][user][LMDB_LIST_TAG][d u8][seq BE][item] → [at_ms u64][set u32]  (the user index)
 *   rows   a row's value ends with the pair's record: [set u32, disk codes][any seq u64][seq u64 per
 *          kind of the set, in disk-code order] (where its entries are; absent: none)
 * The position is big-endian so that an item's (or a user's) entries of one kind sort by position: a
 * page is one backwards walk of one key range. The record lives in the row so that the fold's update
 * of it lands on the page the write made dirty in the same transaction; the user index lives beside
 * the user's idempotency records for the same reason (a keyed write's new entry and its record share a
 * leaf: one page written where two were, measured in bench/RESULTS.md). In one mode a pair has one
 * kind, and its entry under that kind is the only one (a page of any kind merges the kinds' ranges:
 * half the entries to write); in many mode d = 0 holds each pair at its last change, and the set in
 * an entry's value is current only there (a kind's page reads the pair's record). */
#include "store/lmdb/lmdb_internal.h"

#include <stdio.h>

#include "core/clock.h"

#define LIST_VALUE_LEN 12 /* [at_ms u64][set u32] */
#define LIST_KEY_LEN (1 + 255 + 2 + 8 + 255)

typedef struct {
    uint32_t set; /* disk codes, bit d */
    uint64_t any_seq;
    uint64_t kind_seq[KINDS_MAX + 1]; /* by disk code */
} pos_t;

/* The two indexes: who reacted to an item (by item), what a user reacted to (by user). */
typedef enum { BY_ITEM, BY_USER } index_t;

static MDB_dbi index_db(const lmdb_store_t *s, index_t x)
{
    return x == BY_USER ? s->idem : s->litem;
}

/* [len][a]([LMDB_LIST_TAG] by user)[d][seq BE][b]; with seq and b absent (prefix_only): the prefix of
 * a's list of kind d. */
static size_t list_key(uint8_t buf[LIST_KEY_LEN], index_t x, span_t a, int d, uint64_t seq, span_t b, bool prefix_only)
{
    size_t n = 0;
    buf[n++] = (uint8_t)a.len;
    memcpy(buf + n, a.ptr, a.len);
    n += a.len;
    if (x == BY_USER)
        buf[n++] = LMDB_LIST_TAG;
    buf[n++] = (uint8_t)d;
    if (prefix_only)
        return n;
    lmdb_put_be64(buf + n, seq);
    memcpy(buf + n + 8, b.ptr, b.len);
    return n + 8 + b.len;
}

/* Whether mode keeps "any kind" entries (d = 0). */
static bool has_any(const lmdb_store_t *s)
{
    return s->mode == REACTION_MODE_MANY;
}

/* The pair's record from the end of a row value (found false: none). */
static int pos_decode(const MDB_val *val, pos_t *p, bool *found)
{
    memset(p, 0, sizeof *p);
    size_t base = lmdb_row_base_len(val);
    *found = false;
    if (base == 0)
        return STORE_ERROR;
    if (val->mv_size == base)
        return STORE_OK;
    const uint8_t *v = (const uint8_t *)val->mv_data + base;
    size_t n = val->mv_size - base;
    uint32_t set;
    if (n < 12)
        return STORE_ERROR;
    memcpy(&set, v, 4);
    if (n != 12 + 8 * (size_t)__builtin_popcount(set) || (set & 1u) || set >> (KINDS_MAX + 1))
        return STORE_ERROR;
    p->set = set;
    p->any_seq = lmdb_get_u64(v + 4);
    size_t off = 12;
    for (uint32_t m = set; m; m &= m - 1, off += 8)
        p->kind_seq[__builtin_ctz(m)] = lmdb_get_u64(v + off);
    *found = true;
    return STORE_OK;
}

static int pos_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, pos_t *p, bool *found)
{
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf}, val;
    memset(p, 0, sizeof *p);
    *found = false;
    int rc = mdb_get(txn, s->rows, &key, &val);
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    return rc == MDB_SUCCESS ? pos_decode(&val, p, found) : lmdb_rc(rc);
}

/* The reaction part of a pair's row (a row of none at version 0 when there is none: only damaged
 * lists have an entry without a row, and such a row reads as no row). */
typedef struct {
    uint8_t bytes[ROW_VALUE_SET_LEN];
    size_t len;
    bool exists;
} row_base_t;

static int base_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, row_base_t *b)
{
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf}, val;
    memset(b, 0, sizeof *b);
    b->len = ROW_VALUE_LEN;
    int rc = mdb_get(txn, s->rows, &key, &val);
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    if ((b->len = lmdb_row_base_len(&val)) == 0)
        return STORE_ERROR;
    memcpy(b->bytes, val.mv_data, b->len);
    b->exists = true;
    return STORE_OK;
}

/* Writes the pair's record after the row's reaction part b (p NULL: removes it). */
static int pos_write(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, const row_base_t *b, const pos_t *p)
{
    if (!p && !b->exists)
        return STORE_OK;
    char kbuf[KEY_BUF_LEN];
    uint8_t v[ROW_VALUE_SET_LEN + LMDB_LIST_RECORD_MAX];
    size_t len = b->len;
    memcpy(v, b->bytes, len);
    if (p) {
        memcpy(v + len, &p->set, 4);
        lmdb_put_u64(v + len + 4, p->any_seq);
        len += 12;
        for (uint32_t m = p->set; m; m &= m - 1, len += 8)
            lmdb_put_u64(v + len, p->kind_seq[__builtin_ctz(m)]);
    }
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf}, val = {len, v};
    return lmdb_rc(lmdb_put(txn, s->rows, &key, &val, 0));
}

static int pos_put(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, const pos_t *p)
{
    row_base_t b;
    int rc = base_get(s, txn, item, user, &b);
    return rc == STORE_OK ? pos_write(s, txn, item, user, &b, p) : rc;
}

/* The pair's entry of kind d at seq, in both indexes. */
static int entry_put(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, int d, uint64_t seq, uint64_t at_ms,
                     uint32_t set)
{
    uint8_t kbuf[LIST_KEY_LEN], v[LIST_VALUE_LEN];
    lmdb_put_u64(v, at_ms);
    memcpy(v + 8, &set, 4);
    MDB_val key = {list_key(kbuf, BY_ITEM, item, d, seq, user, false), kbuf}, val = {sizeof v, v};
    int rc = lmdb_put(txn, index_db(s, BY_ITEM), &key, &val, 0);
    if (rc == MDB_SUCCESS) {
        key = (MDB_val){list_key(kbuf, BY_USER, user, d, seq, item, false), kbuf};
        rc = lmdb_put(txn, index_db(s, BY_USER), &key, &val, 0);
    }
    return lmdb_rc(rc);
}

static int entry_del(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, int d, uint64_t seq)
{
    uint8_t kbuf[LIST_KEY_LEN];
    MDB_val key = {list_key(kbuf, BY_ITEM, item, d, seq, user, false), kbuf};
    int rc = lmdb_del(txn, index_db(s, BY_ITEM), &key);
    if (rc == MDB_SUCCESS || rc == MDB_NOTFOUND) {
        key = (MDB_val){list_key(kbuf, BY_USER, user, d, seq, item, false), kbuf};
        rc = lmdb_del(txn, index_db(s, BY_USER), &key);
    }
    return rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* The pair's entries become what c says: old ones removed where they move or leave, new ones put. */
static int txn_list_apply(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, const list_change_t *c)
{
    if (item.len > 255 || user.len > 255)
        return STORE_ERROR;
    pos_t old, now = {0};
    bool found = false;
    row_base_t base;
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, item, user), kbuf}, val;
    int rc = lmdb_rc(mdb_get(txn, s->rows, &key, &val)); /* once: the reaction part and the record */
    memset(&base, 0, sizeof base);
    memset(&old, 0, sizeof old);
    base.len = ROW_VALUE_LEN;
    if (rc == STORE_OK) {
        base.exists = true;
        if ((rc = pos_decode(&val, &old, &found)) == STORE_OK)
            memcpy(base.bytes, val.mv_data, base.len = lmdb_row_base_len(&val));
    }
    if (rc == STORE_NOTFOUND)
        rc = STORE_OK;
    if (rc != STORE_OK)
        return rc;
    uint32_t set = lmdb_set_to_db(s, c->set), joined = lmdb_set_to_db(s, c->joined & c->set);
    if (found) {
        if (has_any(s))
            rc = entry_del(s, txn, item, user, 0, old.any_seq);
        for (uint32_t m = old.set; rc == STORE_OK && m; m &= m - 1) {
            int d = __builtin_ctz(m);
            if (!(set >> d & 1u) || (joined >> d & 1u))
                rc = entry_del(s, txn, item, user, d, old.kind_seq[d]);
        }
    }
    if (rc != STORE_OK || set == 0)
        return rc == STORE_OK && found ? pos_write(s, txn, item, user, &base, NULL) : rc;
    now.set = set;
    now.any_seq = c->seq;
    if (has_any(s))
        rc = entry_put(s, txn, item, user, 0, c->seq, c->at_ms, set);
    for (uint32_t m = set; rc == STORE_OK && m; m &= m - 1) {
        int d = __builtin_ctz(m), code = s->db_to_cfg[d];
        if ((joined >> d & 1u) || !(old.set >> d & 1u)) { /* moved (or, from damaged lists, missing) */
            bool moved = joined >> d & 1u;
            now.kind_seq[d] = moved ? c->kind_seq[code] : c->seq;
            rc = entry_put(s, txn, item, user, d, now.kind_seq[d], moved ? c->kind_at[code] : c->at_ms, set);
        } else {
            now.kind_seq[d] = old.kind_seq[d];
        }
    }
    return rc == STORE_OK ? pos_write(s, txn, item, user, &base, &now) : rc;
}

int lmdb_list_apply(store_write_t *w_, span_t item, span_t user, const list_change_t *c)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    if (c->set && c->seq == 0)
        return STORE_ERROR; /* a position taken at commit comes from another shard's log: never here (one shard) */
    return txn_list_apply(w->store, w->txn, item, user, c);
}

/* --- building the lists from the rows and the retained log --- */

typedef struct {
    const lmdb_store_t *s;
    MDB_txn *txn;
    uint64_t at_ms; /* the time given to what changed before the retained log */
    int rc;
} build_t;

static int build_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    build_t *b = arg;
    if (row->set == KINDSET_EMPTY)
        return 0;
    list_change_t c;
    list_change_init(&c);
    list_change_add(&c, KINDSET_EMPTY, row->set, 0, b->at_ms);
    b->rc = txn_list_apply(b->s, b->txn, item, user, &c);
    return b->rc != STORE_OK;
}

static int build_entry(void *arg, uint64_t seq, const transition_t *t)
{
    build_t *b = arg;
    if (t->from == t->to)
        return 0; /* a void or a restore: the lists keep the user's reactions where they were */
    list_change_t c;
    list_change_init(&c);
    list_change_add(&c, t->from, t->to, seq, t->at_ms);
    b->rc = txn_list_apply(b->s, b->txn, t->item, t->user, &c);
    return b->rc != STORE_OK;
}

static int first_log_at(const lmdb_store_t *s, MDB_txn *txn, uint64_t *at_ms)
{
    MDB_cursor *cur;
    MDB_val key, val;
    *at_ms = clock_ms(CLOCK_REALTIME);
    int rc = mdb_cursor_open(txn, s->log, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
    if (rc == MDB_SUCCESS && val.mv_size >= 8)
        *at_ms = lmdb_get_u64(val.mv_data);
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND || rc == MDB_SUCCESS ? STORE_OK : lmdb_rc(rc);
}

/* Rows: every pair at position 0; then the retained log, in order, moves each pair (and each kind) to
 * its last change. The log may run past the checkpoint: the fold applies those entries again, which
 * leaves the same lists (an entry's change replaces what the lists held for the pair). */
int lmdb_txn_lists_rebuild(const lmdb_store_t *s, MDB_txn *txn)
{
    build_t b = {s, txn, 0, STORE_OK};
    int rc = lmdb_rc(lmdb_empty(txn, s->litem));
    if (rc == STORE_OK)
        rc = lmdb_idem_drop_lists(s, txn);
    if (rc == STORE_OK) /* the check counts the user index as idem less idem_exp: make that exact too */
        rc = lmdb_idem_exp_tidy(s, txn);
    if (rc == STORE_OK)
        rc = first_log_at(s, txn, &b.at_ms);
    MDB_cursor *cur = NULL;
    if (rc == STORE_OK)
        rc = lmdb_rc(mdb_cursor_open(txn, s->rows, &cur));
    MDB_val key, val;
    char kbuf[KEY_BUF_LEN];
    int mrc = MDB_NOTFOUND;
    /* each row is rewritten (its record): the walk goes on from a copy of its key */
    for (mrc = rc == STORE_OK ? mdb_cursor_get(cur, &key, &val, MDB_FIRST) : MDB_NOTFOUND;
         mrc == MDB_SUCCESS && b.rc == STORE_OK; mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        span_t item;
        if (!lmdb_key_item(&key, &item) || key.mv_size > sizeof kbuf) {
            b.rc = STORE_ERROR;
            break;
        }
        memcpy(kbuf, key.mv_data, key.mv_size);
        size_t klen = key.mv_size;
        item.ptr = kbuf + 1;
        span_t user = {item.ptr + item.len, klen - 1 - item.len};
        reaction_row_t row;
        lmdb_row_decode(s, &val, &row);
        if (lmdb_row_base_len(&val) != val.mv_size && (b.rc = pos_put(s, txn, item, user, NULL)) != STORE_OK)
            break;
        if (build_row(&b, item, user, &row) != 0)
            break;
        key = (MDB_val){klen, kbuf};
        if ((mrc = mdb_cursor_get(cur, &key, &val, MDB_SET)) != MDB_SUCCESS)
            break;
    }
    if (cur)
        mdb_cursor_close(cur);
    if (rc == STORE_OK && mrc != MDB_NOTFOUND && mrc != MDB_SUCCESS)
        rc = lmdb_rc(mrc);
    if (rc == STORE_OK)
        rc = b.rc;
    if (rc == STORE_OK)
        rc = lmdb_txn_log_scan(s, txn, 0, SIZE_MAX, build_entry, &b);
    return rc == STORE_OK ? b.rc : rc;
}

int lmdb_lists_rebuild(store_write_t *w_)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    return lmdb_txn_lists_rebuild(w->store, w->txn);
}

/* --- a user's walk (erasure) --- */

/* The items of the user's list under any kind, in position order, from the first: the writer folded the
 * log first (writer_catch_up), so the list is exact and the rows earlier chunks cleared are gone
 * from it. Costs the user's reactions, whatever the number of items. */
int lmdb_user_items(store_write_t *w_, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                    size_t *visited, char last[ID_MAX_LEN], size_t *last_len)
{
    (void)after;
    (void)last;
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    *visited = 0;
    *last_len = 0;
    if (user.len > 255)
        return STORE_ERROR;
    uint8_t prefix[LIST_KEY_LEN];
    /* many mode: the "any kind" entries; one mode: every entry of the user (one per item) */
    size_t plen = list_key(prefix, BY_USER, user, 0, 0, (span_t){"", 0}, true) - !has_any(s);
    MDB_cursor *cur;
    int rc = mdb_cursor_open(w->txn, index_db(s, BY_USER), &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key = {plen, prefix}, val;
    char name[ID_MAX_LEN];
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS && *visited < limit;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        size_t head = plen + !has_any(s) + 8; /* [len][user][d][seq] */
        if (key.mv_size < head || memcmp(key.mv_data, prefix, plen) != 0)
            break;
        size_t len = key.mv_size - head;
        if (len == 0 || len > ID_MAX_LEN) {
            rc = MDB_CORRUPTED;
            break;
        }
        memcpy(name, (const char *)key.mv_data + head, len); /* the walk writes: copy the key first */
        (*visited)++;
        if (fn(arg, (span_t){name, len}) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* --- pages --- */

/* One kind's range of a page, walked backwards from below the cursor. */
typedef struct {
    MDB_cursor *cur;
    MDB_val key, val;
    bool live;
    int d;
} head_t;

/* Moves h to its next entry (first: to the last one below start) and says whether it is in range. */
static int head_step(head_t *h, const uint8_t *prefix, size_t plen, MDB_val *start)
{
    int rc;
    if (start) {
        h->key = *start;
        rc = mdb_cursor_get(h->cur, &h->key, &h->val, MDB_SET_RANGE);
        rc = rc == MDB_SUCCESS    ? mdb_cursor_get(h->cur, &h->key, &h->val, MDB_PREV)
             : rc == MDB_NOTFOUND ? mdb_cursor_get(h->cur, &h->key, &h->val, MDB_LAST)
                                  : rc;
    } else {
        rc = mdb_cursor_get(h->cur, &h->key, &h->val, MDB_PREV);
    }
    h->live = rc == MDB_SUCCESS && h->key.mv_size >= plen + 8 && memcmp(h->key.mv_data, prefix, plen - 1) == 0 &&
              ((const uint8_t *)h->key.mv_data)[plen - 1] == h->d;
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? MDB_SUCCESS : rc;
}

/* Which of two heads' entries comes first, newest first: the larger (seq, name) after the prefix. */
static bool head_before(const head_t *a, const head_t *b, size_t plen)
{
    size_t na = a->key.mv_size - plen, nb = b->key.mv_size - plen;
    int c = memcmp((const uint8_t *)a->key.mv_data + plen, (const uint8_t *)b->key.mv_data + plen, na < nb ? na : nb);
    return c > 0 || (c == 0 && na > nb);
}

/* A page: one backwards range walk, or (a page of any kind in one mode) a merge of each kind's range,
 * all below (seq, name) when a cursor is given. */
int lmdb_read_list(store_read_t *r_, const store_list_query_t *q, store_list_fn fn, void *arg)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    const lmdb_store_t *s = r->store;
    if (q->key.len > 255 || q->name.len > 255 || q->kind < 0 || q->kind > s->kinds.count)
        return STORE_ERROR;
    head_t heads[KINDS_MAX + 1] = {0};
    int nheads = 0;
    if (q->kind != KIND_NONE)
        heads[nheads++].d = s->cfg_to_db[q->kind];
    else if (has_any(s))
        heads[nheads++].d = 0;
    else
        for (int d = 1; d <= s->db_kinds; d++)
            heads[nheads++].d = d;
    uint8_t prefix[LIST_KEY_LEN], start[LIST_KEY_LEN];
    index_t x = q->by_user ? BY_USER : BY_ITEM;
    size_t plen = list_key(prefix, x, q->key, 0, 0, (span_t){"", 0}, true);
    int rc = MDB_SUCCESS, result = STORE_OK;
    for (int i = 0; i < nheads && rc == MDB_SUCCESS; i++) {
        int d = heads[i].d;
        /* below the cursor, or below the first key of the next kind (all of this kind) */
        size_t slen = q->has_cursor ? list_key(start, x, q->key, d, q->seq, q->name, false)
                                    : list_key(start, x, q->key, d + 1, 0, (span_t){"", 0}, true);
        MDB_val sk = {slen, start};
        if ((rc = mdb_cursor_open(r->txn, index_db(s, x), &heads[i].cur)) == MDB_SUCCESS)
            rc = head_step(&heads[i], prefix, plen, &sk);
    }
    for (size_t n = 0; rc == MDB_SUCCESS && n < q->limit; n++) {
        head_t *h = NULL;
        for (int i = 0; i < nheads; i++)
            if (heads[i].live && (!h || head_before(&heads[i], h, plen)))
                h = &heads[i];
        if (!h)
            break;
        const uint8_t *k = h->key.mv_data;
        if (h->val.mv_size != LIST_VALUE_LEN) {
            result = STORE_ERROR;
            break;
        }
        span_t name = {(const char *)k + plen + 8, h->key.mv_size - plen - 8};
        uint64_t seq = lmdb_get_be64(k + plen), at_ms = lmdb_get_u64(h->val.mv_data);
        uint32_t set;
        memcpy(&set, (const uint8_t *)h->val.mv_data + 8, 4);
        if (h->d != 0 && has_any(s)) { /* many mode: a kind's entry does not move with the set */
            pos_t p;
            bool found;
            span_t item = q->by_user ? name : q->key, user = q->by_user ? q->key : name;
            if ((result = pos_get(s, r->txn, item, user, &p, &found)) != STORE_OK)
                break;
            set = p.set;
        }
        if (fn(arg, name, seq, at_ms, lmdb_set_from_db(s, set)) != 0)
            break;
        rc = head_step(h, prefix, plen, NULL);
    }
    for (int i = 0; i < nheads; i++)
        if (heads[i].cur)
            mdb_cursor_close(heads[i].cur);
    if (result == STORE_OK && rc != MDB_SUCCESS)
        result = lmdb_rc(rc);
    return result;
}

/* --- the check: lists against rows --- */

static bool entry_has(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, int d, uint64_t seq)
{
    uint8_t kbuf[LIST_KEY_LEN];
    MDB_val key = {list_key(kbuf, BY_ITEM, item, d, seq, user, false), kbuf}, val;
    if (mdb_get(txn, index_db(s, BY_ITEM), &key, &val) != MDB_SUCCESS)
        return false;
    key = (MDB_val){list_key(kbuf, BY_USER, user, d, seq, item, false), kbuf};
    return mdb_get(txn, index_db(s, BY_USER), &key, &val) == MDB_SUCCESS;
}

/* How many keys of db start with prefix. */
static int count_prefix(MDB_txn *txn, MDB_dbi db, const void *prefix, size_t plen, uint64_t *n)
{
    MDB_cursor *cur;
    *n = 0;
    int rc = mdb_cursor_open(txn, db, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key = {plen, (void *)prefix}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size < plen || memcmp(key.mv_data, prefix, plen) != 0)
            break;
        (*n)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

static uint64_t diff(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* One item's check, added to *mismatches. */
static int check_item(const lmdb_read_t *r, span_t item, store_list_expect_fn expect, void *arg, uint64_t *mismatches)
{
    const lmdb_store_t *s = r->store;
    if (item.len > 255)
        return STORE_ERROR;
    char prefix[KEY_BUF_LEN];
    size_t plen = lmdb_pair_key(prefix, item, (span_t){"", 0});
    uint64_t want_entries = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, s->rows, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key = {plen, prefix}, val;
    int result = STORE_OK;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size <= plen || memcmp(key.mv_data, prefix, plen) != 0)
            break;
        span_t user = {(const char *)key.mv_data + plen, key.mv_size - plen};
        reaction_row_t row;
        lmdb_row_decode(s, &val, &row);
        uint32_t want = lmdb_set_to_db(s, expect(arg, item, user, row.set));
        pos_t p;
        bool found;
        if ((result = pos_get(s, r->txn, item, user, &p, &found)) != STORE_OK)
            break;
        if (want == 0) {
            *mismatches += found;
            continue;
        }
        want_entries += has_any(s) + (uint64_t)__builtin_popcount(want);
        if (!found || p.set != want) {
            (*mismatches)++;
            continue;
        }
        if (has_any(s))
            *mismatches += !entry_has(s, r->txn, item, user, 0, p.any_seq);
        for (uint32_t m = want; m; m &= m - 1) {
            int d = __builtin_ctz(m);
            *mismatches += !entry_has(s, r->txn, item, user, d, p.kind_seq[d]);
        }
    }
    mdb_cursor_close(cur);
    if (result == STORE_OK && rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        result = lmdb_rc(rc);
    uint64_t have_entries = 0;
    if (result == STORE_OK)
        result = count_prefix(r->txn, index_db(s, BY_ITEM), prefix, plen, &have_entries);
    if (result == STORE_OK)
        *mismatches += diff(have_entries, want_entries);
    return result;
}

/* One item after the other (the snapshot is in memory); with none, the two indexes' sizes. */
int lmdb_read_lists_check(store_read_t *r_, const span_t *items, size_t n, store_list_expect_fn expect, void *arg,
                          uint64_t *mismatches)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    const lmdb_store_t *s = r->store;
    *mismatches = 0;
    if (n == 0) {
        MDB_stat a;
        uint64_t by_user;
        int rc = lmdb_rc(mdb_stat(r->txn, s->litem, &a));
        if (rc == STORE_OK)
            rc = lmdb_idem_list_entries(s, r->txn, &by_user);
        if (rc == STORE_OK)
            *mismatches = diff(a.ms_entries, by_user);
        return rc;
    }
    int rc = STORE_OK;
    for (size_t i = 0; i < n && rc == STORE_OK; i++)
        rc = check_item(r, items[i], expect, arg, mismatches);
    return rc;
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
    LMDB_WRITE_CHECK(w);
    return prefix_walk(w->txn, w->store->rows, item, after, limit, fn, arg, visited);
}

int lmdb_read_list_pairs(store_read_t *r, span_t item, store_pair_fn fn, void *arg)
{
    (void)r, (void)item, (void)fn, (void)arg;
    return STORE_ERROR; /* a user's list and its items are on one shard, always, here */
}
