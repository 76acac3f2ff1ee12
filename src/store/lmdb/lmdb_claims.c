/* lmdb_claims.c — the idempotency claims of the LMDB store (engine/claims.h): claims, keyed (user,
 * key) as the idempotency records are ([len][user][key]), whose value is [u64 expiry][fingerprint];
 * and claims_exp, their expiry index in time order ([be64 expiry][claim's key] → empty), exactly one
 * entry per claim, which the sweep walks from its oldest. */
#include "store/lmdb/lmdb_internal.h"

#define CLAIM_VALUE_LEN (8 + FINGERPRINT_LEN)

static size_t claim_exp_key(uint8_t buf[8 + KEY_BUF_LEN], uint64_t expires_ms, const MDB_val *key)
{
    lmdb_put_be64(buf, expires_ms);
    memcpy(buf + 8, key->mv_data, key->mv_size);
    return 8 + key->mv_size;
}

/* Deletes the claim at key (whose value is old) and its expiry entry. */
static int claim_delete(lmdb_write_t *w, MDB_val *key, const MDB_val *old)
{
    const lmdb_store_t *s = w->store;
    uint8_t ebuf[8 + KEY_BUF_LEN];
    MDB_val ekey = {claim_exp_key(ebuf, lmdb_get_u64(old->mv_data), key), ebuf};
    int rc = lmdb_del(w->txn, s->claims, key);
    if (rc == MDB_SUCCESS)
        rc = lmdb_del(w->txn, s->claims_exp, &ekey);
    return rc == MDB_NOTFOUND ? MDB_SUCCESS : rc; /* an entry already gone: the index stays exact */
}

static int claim_one(lmdb_write_t *w, store_claim_t *c, uint64_t now_ms)
{
    const lmdb_store_t *s = w->store;
    c->held = false;
    if (c->key.len == 0 || c->key.len > 255 || c->user.len > ID_MAX_LEN)
        return MDB_BAD_VALSIZE;
    char kbuf[KEY_BUF_LEN];
    MDB_val key = {lmdb_pair_key(kbuf, c->user, c->key), kbuf}, val;
    int rc = mdb_get(w->txn, s->claims, &key, &val);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return rc;
    bool found = rc == MDB_SUCCESS;
    if (found && val.mv_size != CLAIM_VALUE_LEN)
        return MDB_CORRUPTED;
    bool same = found && memcmp((const uint8_t *)val.mv_data + 8, c->fingerprint, FINGERPRINT_LEN) == 0;
    bool live = found && lmdb_get_u64(val.mv_data) > now_ms;
    if (c->release) {
        c->held = same;
        return same ? claim_delete(w, &key, &val) : MDB_SUCCESS;
    }
    if (live) { /* held already, by this request or another one: left as it is */
        c->held = same;
        return MDB_SUCCESS;
    }
    if (found && (rc = claim_delete(w, &key, &val)) != MDB_SUCCESS) /* expired: replaced */
        return rc;
    uint8_t v[CLAIM_VALUE_LEN], ebuf[8 + KEY_BUF_LEN];
    lmdb_put_u64(v, c->expires_ms);
    memcpy(v + 8, c->fingerprint, FINGERPRINT_LEN);
    MDB_val nv = {sizeof v, v}, ekey = {claim_exp_key(ebuf, c->expires_ms, &key), ebuf}, empty = {0, NULL};
    if ((rc = lmdb_put(w->txn, s->claims, &key, &nv, 0)) == MDB_SUCCESS &&
        (rc = lmdb_put(w->txn, s->claims_exp, &ekey, &empty, 0)) == MDB_SUCCESS)
        c->held = true;
    return rc;
}

int lmdb_claims_apply(store_write_t *w_, store_claim_t *claims, size_t n, uint64_t now_ms)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    if (!w->store->claims_open)
        return STORE_ERROR;
    for (size_t i = 0; i < n; i++) {
        int rc = claim_one(w, &claims[i], now_ms);
        if (rc != MDB_SUCCESS)
            return lmdb_rc(rc);
    }
    return STORE_OK;
}

/* Erasing a user (lmdb_idem_delete_user): up to limit of the user's claims, which are one range of
 * claims' keys, [len][user]…. */
int lmdb_claims_delete_user(lmdb_write_t *w, span_t user, size_t limit, size_t *deleted)
{
    const lmdb_store_t *s = w->store;
    *deleted = 0;
    if (!s->claims_open)
        return STORE_ERROR;
    char pbuf[KEY_BUF_LEN];
    size_t plen = lmdb_pair_key(pbuf, user, (span_t){"", 0});
    MDB_cursor *cur;
    int rc = mdb_cursor_open(w->txn, s->claims, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    while (*deleted < limit) {
        MDB_val key = {plen, pbuf}, val;
        if ((rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE)) != MDB_SUCCESS)
            break;
        if (key.mv_size <= plen || memcmp(key.mv_data, pbuf, plen) != 0)
            break;
        if (val.mv_size != CLAIM_VALUE_LEN || key.mv_size > KEY_BUF_LEN) {
            rc = MDB_CORRUPTED;
            break;
        }
        uint8_t ebuf[8 + KEY_BUF_LEN];
        MDB_val ekey = {claim_exp_key(ebuf, lmdb_get_u64(val.mv_data), &key), ebuf};
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
        if ((rc = lmdb_del(w->txn, s->claims_exp, &ekey)) != MDB_SUCCESS && rc != MDB_NOTFOUND)
            break;
        rc = MDB_SUCCESS;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}

int lmdb_claims_sweep(store_write_t *w_, uint64_t now_ms, size_t limit, size_t *deleted)
{
    lmdb_write_t *w = (lmdb_write_t *)w_;
    LMDB_WRITE_CHECK(w);
    const lmdb_store_t *s = w->store;
    *deleted = 0;
    if (!s->claims_open)
        return STORE_ERROR;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(w->txn, s->claims_exp, &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_rc(rc);
    MDB_val ekey, eval;
    /* Always the first entry: the index is in expiry order and each pass deletes it. */
    while (*deleted < limit && (rc = mdb_cursor_get(cur, &ekey, &eval, MDB_FIRST)) == MDB_SUCCESS) {
        const uint8_t *p = ekey.mv_data;
        if (ekey.mv_size < 9) {
            rc = MDB_CORRUPTED;
            break;
        }
        uint64_t expires = lmdb_get_be64(p);
        if (expires > now_ms)
            break;
        MDB_val key = {ekey.mv_size - 8, (void *)(p + 8)}, val;
        rc = mdb_get(w->txn, s->claims, &key, &val);
        if (rc == MDB_SUCCESS && val.mv_size == CLAIM_VALUE_LEN && lmdb_get_u64(val.mv_data) == expires)
            rc = lmdb_del(w->txn, s->claims, &key);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
            break;
        if ((rc = lmdb_cursor_del(cur)) != MDB_SUCCESS)
            break;
        (*deleted)++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_SUCCESS || rc == MDB_NOTFOUND ? STORE_OK : lmdb_rc(rc);
}
