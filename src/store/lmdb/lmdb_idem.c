/* store_lmdb_idem.c — idempotency records of the LMDB store: the records keyed (user, key), their
 * expiry index in time order, the sweep, and erasure of a user's records. */
#include "store/lmdb/lmdb_internal.h"

/* --- idempotency records --- */

static size_t exp_key(char buf[8 + KEY_BUF_LEN], uint64_t expires_ms, const char *idem_key, size_t idem_len)
{
    for (int i = 7; i >= 0; i--, expires_ms >>= 8)
        buf[i] = (char)(expires_ms & 0xff);
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

int lmdb_idem_get(store_write_t *w_, span_t user, span_t key_text, store_idem_t *rec)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
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
    const lmdb_store_t *s = w->store;
    char kbuf[KEY_BUF_LEN], ebuf[8 + KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, user, key_text), kbuf}, val;
    int rc = mdb_get(w->txn, s->idem, &key, &val);
    if (rc == MDB_SUCCESS && val.mv_size >= 8) { /* replacing an expired record: drop its index entry */
        MDB_val old = {exp_key(ebuf, lmdb_get_u64(val.mv_data), kbuf, key.mv_size), ebuf};
        rc = mdb_del(w->txn, s->idem_exp, &old, NULL);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            return lmdb_rc(rc);
    } else if (rc != MDB_NOTFOUND && rc != MDB_SUCCESS) {
        return lmdb_rc(rc);
    }
    val.mv_size = IDEM_HEADER_LEN + rec->body.len;
    if ((rc = mdb_put(w->txn, s->idem, &key, &val, MDB_RESERVE)) != MDB_SUCCESS)
        return lmdb_rc(rc);
    uint8_t *p = val.mv_data;
    lmdb_put_u64(p, rec->expires_ms);
    memcpy(p + 8, rec->fingerprint, FINGERPRINT_LEN);
    memcpy(p + 40, &rec->status, sizeof rec->status);
    p[42] = rec->type;
    p[43] = rec->has_etag;
    lmdb_put_u64(p + 44, rec->etag_version);
    memcpy(p + IDEM_HEADER_LEN, rec->body.ptr, rec->body.len);
    MDB_val ekey = {exp_key(ebuf, rec->expires_ms, kbuf, key.mv_size), ebuf}, empty = {0, NULL};
    return lmdb_rc(mdb_put(w->txn, s->idem_exp, &ekey, &empty, 0));
}

int lmdb_idem_sweep(store_write_t *w_, uint64_t now_ms, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
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
        uint64_t expires = 0;
        for (int i = 0; i < 8; i++)
            expires = expires << 8 | p[i];
        if (expires > now_ms)
            break;
        MDB_val key = {ekey.mv_size - 8, (void *)(p + 8)}, val;
        rc = mdb_get(w->txn, s->idem, &key, &val);
        if (rc == MDB_SUCCESS && val.mv_size >= 8 && lmdb_get_u64(val.mv_data) == expires)
            rc = mdb_del(w->txn, s->idem, &key, NULL);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS)
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

int lmdb_idem_delete_user(store_write_t *w_, span_t user, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    char pbuf[KEY_BUF_LEN];
    size_t plen = lmdb_pair_key(pbuf, user, (span_t){"", 0});
    MDB_cursor *cur;
    *deleted = 0;
    int rc = mdb_cursor_open(w->txn, w->store->idem, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
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
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}
