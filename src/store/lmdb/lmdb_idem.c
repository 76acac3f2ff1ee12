/* lmdb_idem.c — idempotency records of the LMDB store: the records keyed (user, key), their
 * expiry index in time order (exactly one entry per record), the sweep, and erasure of a user's
 * records. The same database holds the user index's entries (lmdb_lists.c) under each user's prefix,
 * marked by LMDB_LIST_TAG: every walk here steps over them. */
#include "store/lmdb/lmdb_internal.h"

/* --- idempotency records --- */

static size_t exp_key(char buf[8 + KEY_BUF_LEN], uint64_t expires_ms, const char *idem_key, size_t idem_len)
{
    lmdb_put_be64((uint8_t *)buf, expires_ms);
    memcpy(buf + 8, idem_key, idem_len);
    return 8 + idem_len;
}

static int idem_decode(const MDB_val *val, store_idem_t *rec)
{
    const uint8_t *p = val->mv_data;
    if (val->mv_size < IDEM_HEADER_LEN)
        return STORE_ERROR;
    rec->expires_ms = lmdb_get_u64(p);
    memcpy(rec->fingerprint, p + 8, FINGERPRINT_LEN);
    memcpy(&rec->status, p + 40, sizeof rec->status);
    rec->type = p[42];
    rec->has_etag = p[43];
    rec->etag_version = lmdb_get_u64(p + 44);
    rec->body = (span_t){(const char *)p + IDEM_HEADER_LEN, val->mv_size - IDEM_HEADER_LEN};
    rec->cursor_ordinal = 0; /* stored complete: positions are given at append here */
    return STORE_OK;
}

/* A record's key text is never empty and never begins with the list entries' tag (an Idempotency-Key
 * is printable ASCII): the store keeps the two apart itself. */
static bool idem_key_ok(span_t key_text)
{
    return key_text.len > 0 && (uint8_t)key_text.ptr[0] > LMDB_LIST_TAG;
}

int lmdb_idem_get(store_write_t *w_, span_t user, span_t key_text, store_idem_t *rec)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    if (!idem_key_ok(key_text))
        return STORE_ERROR;
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, user, key_text), kbuf}, val;
    int rc = mdb_get(w->txn, w->store->idem, &key, &val);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    return idem_decode(&val, rec);
}

int lmdb_read_idem(store_read_t *r_, store_idem_fn fn, void *arg)
{
    lmdb_read_t *r = (lmdb_read_t *)r_;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(r->txn, r->store->idem, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val key, val;
    store_idem_t rec;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        const char *k = key.mv_data;
        size_t ulen = key.mv_size ? (uint8_t)k[0] : 0;
        if (lmdb_idem_is_list(&key))
            continue;
        if (key.mv_size < 1 + ulen || idem_decode(&val, &rec) != STORE_OK) {
            rc = MDB_CORRUPTED;
            break;
        }
        if (fn(arg, (span_t){k + 1, ulen}, (span_t){k + 1 + ulen, key.mv_size - 1 - ulen}, &rec) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND || rc == MDB_SUCCESS ? STORE_OK : lmdb_rc(rc);
}

int lmdb_idem_put(store_write_t *w_, span_t user, span_t key_text, const store_idem_t *rec)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    if (!idem_key_ok(key_text))
        return STORE_ERROR;
    char kbuf[KEY_BUF_LEN], ebuf[8 + KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, user, key_text), kbuf}, val;
    int rc = mdb_get(w->txn, s->idem, &key, &val);
    if (rc == MDB_SUCCESS && val.mv_size >= 8) { /* replacing an expired record: drop its index entry */
        MDB_val old = {exp_key(ebuf, lmdb_get_u64(val.mv_data), kbuf, key.mv_size), ebuf};
        rc = lmdb_del(w->txn, s->idem_exp, &old);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            return lmdb_rc(rc);
    } else if (rc != MDB_NOTFOUND && rc != MDB_SUCCESS) {
        return lmdb_rc(rc);
    }
    val.mv_size = IDEM_HEADER_LEN + rec->body.len;
    if ((rc = lmdb_reserve(w->txn, s->idem, &key, &val)) != MDB_SUCCESS)
        return lmdb_rc(rc);
    uint8_t *p = val.mv_data;
    lmdb_put_u64(p, rec->expires_ms);
    memcpy(p + 8, rec->fingerprint, FINGERPRINT_LEN);
    memcpy(p + 40, &rec->status, sizeof rec->status);
    p[42] = rec->type;
    p[43] = rec->has_etag;
    lmdb_put_u64(p + 44, rec->etag_version);
    memcpy(p + IDEM_HEADER_LEN, rec->body.ptr, rec->body.len);
    if ((rc = lmdb_reserved(w->txn, s->idem, &key, &val)) != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val ekey = {exp_key(ebuf, rec->expires_ms, kbuf, key.mv_size), ebuf}, empty = {0, NULL};
    return lmdb_rc(lmdb_put(w->txn, s->idem_exp, &ekey, &empty, 0));
}

int lmdb_idem_sweep(store_write_t *w_, uint64_t now_ms, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    MDB_cursor *cur;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, s->idem_exp, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val ekey, eval;
    /* Always take the first entry: the index is in expiry order and each pass deletes it. */
    while (*deleted < limit && (rc = mdb_cursor_get(cur, &ekey, &eval, MDB_FIRST)) == MDB_SUCCESS) {
        const uint8_t *p = ekey.mv_data;
        if (ekey.mv_size < 9)
            break;
        uint64_t expires = lmdb_get_be64(p);
        if (expires > now_ms)
            break;
        MDB_val key = {ekey.mv_size - 8, (void *)(p + 8)}, val;
        rc = mdb_get(w->txn, s->idem, &key, &val);
        if (rc == MDB_SUCCESS && val.mv_size >= 8 && lmdb_get_u64(val.mv_data) == expires)
            rc = lmdb_del(w->txn, s->idem, &key);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            break;
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

/* Deletes the user's records and their expiry entries, then the user's claims; the user's list entries
 * (which sort before the records) are the lists' to keep. */
int lmdb_idem_delete_user(store_write_t *w_, span_t user, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    char pbuf[KEY_BUF_LEN + 1], ebuf[8 + KEY_BUF_LEN];
    size_t plen = lmdb_pair_key(pbuf, user, (span_t){"", 0});
    pbuf[plen] = LMDB_LIST_TAG + 1; /* the first record's key is at or above this */
    MDB_cursor *cur;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, s->idem, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    while (*deleted < limit) {
        MDB_val key = {plen + 1, pbuf}, val;
        if ((rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE)) != MDB_SUCCESS)
            break;
        if (key.mv_size <= plen || memcmp(key.mv_data, pbuf, plen) != 0)
            break;
        if (val.mv_size < 8 || key.mv_size > KEY_BUF_LEN) {
            rc = MDB_CORRUPTED;
            break;
        }
        MDB_val ekey = {exp_key(ebuf, lmdb_get_u64(val.mv_data), key.mv_data, key.mv_size), ebuf};
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
        if ((rc = lmdb_del(w->txn, s->idem_exp, &ekey)) != MDB_SUCCESS && rc != MDB_NOTFOUND)
            break;
        rc = MDB_SUCCESS;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return lmdb_rc(rc);
    size_t claims = 0;
    int crc = *deleted < limit ? lmdb_claims_delete_user(w, user, limit - *deleted, &claims) : STORE_OK;
    *deleted += claims;
    return crc;
}

int lmdb_idem_records(const lmdb_store_t *s, MDB_txn *txn, uint64_t *n)
{
    MDB_stat st;
    int rc = mdb_stat(txn, s->idem_exp, &st);
    *n = rc == MDB_SUCCESS ? st.ms_entries : 0;
    return lmdb_rc(rc);
}

int lmdb_idem_list_entries(const lmdb_store_t *s, MDB_txn *txn, uint64_t *n)
{
    MDB_stat st;
    uint64_t records = 0;
    int rc = lmdb_idem_records(s, txn, &records);
    if (rc == STORE_OK)
        rc = lmdb_rc(mdb_stat(txn, s->idem, &st));
    *n = rc == STORE_OK && st.ms_entries > records ? st.ms_entries - records : 0;
    return rc;
}

static int is_list(void *arg, const MDB_val *key, const MDB_val *val, bool *del)
{
    (void)arg, (void)val;
    *del = lmdb_idem_is_list(key);
    return MDB_SUCCESS;
}

int lmdb_idem_drop_lists(const lmdb_store_t *s, MDB_txn *txn)
{
    return lmdb_delete_matching(txn, s->idem, is_list, NULL);
}

/* An expiry entry whose record is gone or was replaced. */
typedef struct {
    const lmdb_store_t *s;
    MDB_txn *txn;
} tidy_t;

static int exp_is_stale(void *arg, const MDB_val *ekey, const MDB_val *eval, bool *del)
{
    (void)eval;
    const tidy_t *t = arg;
    const uint8_t *p = ekey->mv_data;
    *del = true;
    if (ekey->mv_size < 9)
        return MDB_SUCCESS;
    MDB_val key = {ekey->mv_size - 8, (void *)(p + 8)}, val;
    int rc = mdb_get(t->txn, t->s->idem, &key, &val);
    if (rc == MDB_SUCCESS)
        *del = val.mv_size < 8 || lmdb_get_u64(val.mv_data) != lmdb_get_be64(p);
    return rc == MDB_NOTFOUND ? MDB_SUCCESS : rc;
}

/* So that idem_exp counts the records exactly: an entry whose record is gone or was replaced goes. */
int lmdb_idem_exp_tidy(const lmdb_store_t *s, MDB_txn *txn)
{
    tidy_t t = {s, txn};
    return lmdb_delete_matching(txn, s->idem_exp, exp_is_stale, &t);
}
