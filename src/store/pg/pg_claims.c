/* pg_claims.c — the PostgreSQL store's idempotency claims (tally_claims, keyed (user, key); engine/
 * claims.h): the claims a batch names are locked and read in one round trip (with the transaction's
 * BEGIN when it is the first statement), decided in C in the batch's order in the write
 * transaction's cache, and written back at commit in the commit's pipeline (pg_claims_flush), as
 * rows and idempotency records are (pg_write.c): a claim that did not exist is inserted by a plain
 * INSERT, so one that another node's batch inserted meanwhile fails this batch (a unique violation:
 * STORE_RETRY), which then runs again and finds it. */
#include "store/pg/pg_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char LOCK_CLAIMS_SQL[] =
    "SELECT \"user\", key, expires_ms, fingerprint FROM tally_claims WHERE (\"user\", key) IN (SELECT * FROM"
    " unnest($1::text[], $2::text[])) ORDER BY 1, 2 FOR UPDATE";

/* A bytea's text form (\x and hex digits) as a fingerprint; -1 (logged as corrupt) when it is not one. */
static int claim_fingerprint(const char *text, size_t len, uint8_t out[FINGERPRINT_LEN])
{
    if (len < 2 || text[0] != '\\' || text[1] != 'x')
        return pg_hex_fingerprint(text, 0, out); /* logs */
    return pg_hex_fingerprint(text + 2, len - 2, out);
}

/* Sends, into the pipeline w's session is in, the locking read of the claims of (user, key) pairs
 * the cache does not hold yet; *sent says whether one was sent (then pg_claims_lock_read reads it). */
int pg_claims_lock_send(pg_write_t *w, const store_pair_t *pairs, size_t n, bool *sent)
{
    pg_buf_t a = {0}, b = {0};
    pg_buf_open(&a);
    pg_buf_open(&b);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (pg_cache_find(&w->claims, pairs[i].a, pairs[i].b))
            continue;
        pg_buf_text_elem(&a, pairs[i].a.ptr, pairs[i].a.len);
        pg_buf_text_elem(&b, pairs[i].b.ptr, pairs[i].b.len);
        m++;
    }
    pg_buf_close(&a);
    pg_buf_close(&b);
    int rc = a.failed || b.failed ? STORE_ERROR : STORE_OK;
    const char *p[] = {a.buf, b.buf};
    *sent = false;
    if (rc == STORE_OK && m) {
        rc = pg_pipe_send_session(w->store, w->sess, LOCK_CLAIMS_SQL, 2, p);
        *sent = rc == STORE_OK;
    }
    pg_buf_free(&a), pg_buf_free(&b);
    return rc;
}

/* Reads what pg_claims_lock_send sent (when it sent something) into the cache; then every pair not
 * found is put in it absent (inserted at commit if taken). */
int pg_claims_lock_read(pg_write_t *w, const store_pair_t *pairs, size_t n, bool sent)
{
    int rc = STORE_OK;
    PGresult *res = sent ? pg_pipe_result(w->store, w->sess->conn, "lock-claims", &rc) : NULL;
    for (int i = 0; res && rc == STORE_OK && i < PQntuples(res); i++) {
        pg_entry_t *e = pg_cache_put(&w->claims, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)},
                                     (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)});
        if (!e) {
            rc = STORE_ERROR;
            break;
        }
        e->stored = e->present = true;
        e->rec.expires_ms = strtoull(PQgetvalue(res, i, 2), NULL, 10);
        if (claim_fingerprint(PQgetvalue(res, i, 3), (size_t)PQgetlength(res, i, 3), e->rec.fingerprint) != 0)
            rc = STORE_ERROR;
    }
    PQclear(res);
    for (size_t i = 0; rc == STORE_OK && i < n; i++) /* what was not found does not exist yet */
        if (!pg_cache_put(&w->claims, pairs[i].a, pairs[i].b))
            rc = STORE_ERROR;
    return rc;
}

/* Locks and reads the claims of pairs[0..n) the cache does not hold yet (those store_write_prepare
 * named are held already: no round trip then), with the transaction's BEGIN when it is the first. */
static int claims_lock(pg_write_t *w, const store_pair_t *pairs, size_t n)
{
    pg_store_t *s = w->store;
    size_t missing = 0;
    for (size_t i = 0; i < n; i++)
        missing += !pg_cache_find(&w->claims, pairs[i].a, pairs[i].b);
    if (!missing)
        return STORE_OK;
    bool send_begin = !w->began, sent = false;
    int rc = pg_pipe_enter(s, w->sess->conn);
    bool entered = rc == STORE_OK;
    if (rc == STORE_OK && send_begin)
        rc = pg_pipe_send(s, w->sess->conn, "BEGIN ISOLATION LEVEL READ COMMITTED", 0, NULL);
    if (rc == STORE_OK)
        rc = pg_claims_lock_send(w, pairs, n, &sent);
    if (rc == STORE_OK)
        rc = pg_pipe_sync(s, w->sess->conn);
    if (rc == STORE_OK && send_begin) {
        PQclear(pg_pipe_result(s, w->sess->conn, "begin", &rc));
        w->began = rc == STORE_OK;
    }
    if (rc == STORE_OK)
        rc = pg_claims_lock_read(w, pairs, n, sent);
    if (entered) {
        int left = pg_pipe_leave(s, w->sess->conn);
        if (rc == STORE_OK)
            rc = left;
    }
    w->began = w->began || (send_begin && PQtransactionStatus(w->sess->conn) != PQTRANS_IDLE);
    return rc;
}

int pg_claims_apply(store_write_t *w_, store_claim_t *claims, size_t n, uint64_t now_ms)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    for (size_t i = 0; i < n; i++)
        if (claims[i].key.len == 0 || claims[i].key.len > 255 || claims[i].user.len > ID_MAX_LEN)
            return STORE_ERROR;
    store_pair_t *pairs = malloc((n ? n : 1) * sizeof *pairs);
    if (!pairs)
        return STORE_ERROR;
    for (size_t i = 0; i < n; i++)
        pairs[i] = (store_pair_t){claims[i].user, claims[i].key};
    int rc = claims_lock(w, pairs, n);
    free(pairs);
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        store_claim_t *c = &claims[i];
        pg_entry_t *e = pg_cache_find(&w->claims, c->user, c->key);
        if (!e)
            return STORE_ERROR; /* put there by claims_lock */
        bool same = e->present && memcmp(e->rec.fingerprint, c->fingerprint, FINGERPRINT_LEN) == 0;
        if (c->release) {
            c->held = same;
            e->dirty |= same;
            e->present = e->present && !same;
        } else if (e->present && e->rec.expires_ms > now_ms) { /* held: left as it is */
            c->held = same;
        } else { /* none, or expired: written */
            memcpy(e->rec.fingerprint, c->fingerprint, FINGERPRINT_LEN);
            e->rec.expires_ms = c->expires_ms;
            e->present = e->dirty = c->held = true;
        }
    }
    return rc;
}

/* The claims the transaction changed, into the commit's pipeline: deleted, replaced (an expired one,
 * or one deleted and taken again), inserted. */
int pg_claims_flush(pg_write_t *w)
{
    enum { U, K, EXP, FP, NCOL };
    int rc = STORE_OK;
    for (int part = 0; part < 3 && rc == STORE_OK; part++) {
        pg_buf_t col[NCOL] = {0};
        for (int c = 0; c < NCOL; c++)
            pg_buf_open(&col[c]);
        size_t n = 0;
        for (size_t i = 0; i < w->claims.count; i++) {
            const pg_entry_t *e = &w->claims.entries[i];
            int is = !e->dirty ? -1 : !e->present ? (e->stored ? 0 : -1) : e->stored ? 1 : 2;
            if (is != part)
                continue;
            char fp[2 + 2 * FINGERPRINT_LEN + 1] = "\\x";
            for (size_t k = 0; k < FINGERPRINT_LEN; k++)
                snprintf(fp + 2 + 2 * k, 3, "%02x", e->rec.fingerprint[k]);
            pg_buf_text_elem(&col[U], e->a, e->alen);
            pg_buf_text_elem(&col[K], e->b, e->blen);
            pg_buf_int_elem(&col[EXP], (long long)e->rec.expires_ms);
            pg_buf_text_elem(&col[FP], fp, sizeof fp - 1);
            n++;
        }
        for (int c = 0; c < NCOL; c++) {
            pg_buf_close(&col[c]);
            if (col[c].failed)
                rc = STORE_ERROR;
        }
        const char *p[NCOL];
        for (int c = 0; c < NCOL; c++)
            p[c] = col[c].buf;
        if (rc == STORE_OK && n && part == 0)
            rc = pg_wrun(w, "delete-claims",
                         "DELETE FROM tally_claims c USING unnest($1::text[], $2::text[]) AS t(u, k)"
                         " WHERE c.\"user\" = t.u AND c.key = t.k",
                         2, p);
        else if (rc == STORE_OK && n && part == 1)
            rc =
                pg_wrun(w, "replace-claims",
                        "UPDATE tally_claims c SET expires_ms = t.e, fingerprint = t.f FROM unnest($1::text[],"
                        " $2::text[], $3::int8[], $4::bytea[]) AS t(u, k, e, f) WHERE c.\"user\" = t.u AND c.key = t.k",
                        NCOL, p);
        else if (rc == STORE_OK && n)
            rc = pg_wrun(w, "insert-claims",
                         "INSERT INTO tally_claims (\"user\", key, expires_ms, fingerprint)"
                         " SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::bytea[])",
                         NCOL, p);
        for (int c = 0; c < NCOL; c++)
            pg_buf_free(&col[c]);
    }
    return rc;
}

int pg_claims_sweep(store_write_t *w_, uint64_t now_ms, size_t limit, size_t *deleted)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    char now[PG_NUM_LEN], lim[PG_NUM_LEN];
    pg_num(now, now_ms);
    pg_num(lim, limit);
    const char *p[] = {now, lim};
    /* SKIP LOCKED: a claim another node's batch holds is that batch's to decide */
    return pg_count_deleted((pg_write_t *)w_, "claims-sweep",
                            "WITH d AS (DELETE FROM tally_claims WHERE ctid = ANY(ARRAY(SELECT ctid FROM tally_claims"
                            " WHERE expires_ms <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING 1)"
                            " SELECT count(*) FROM d",
                            2, p, deleted);
}
