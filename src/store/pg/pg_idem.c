/* pg_idem.c — the PostgreSQL store's idempotency records (tally_idem, keyed (user, key)): read and
 * written through the write transaction's cache (locked when first read, written back at commit by
 * pg_write.c), swept by expiry, erased with their user; and every record, for moving a store. */
#include "store/pg/pg_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pg_idem_get(store_write_t *w_, span_t user, span_t key, store_idem_t *rec)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_entry_t *e = pg_cache_find(&w->idem, user, key);
    if (!e) {
        int rc = pg_idem_lock(w, user, key);
        if (rc != STORE_OK)
            return rc;
        e = pg_cache_find(&w->idem, user, key);
    }
    if (!e || !e->present)
        return STORE_NOTFOUND;
    *rec = e->rec;
    return STORE_OK;
}

int pg_idem_put(store_write_t *w_, span_t user, span_t key, const store_idem_t *rec)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_entry_t *e = pg_cache_put(&w->idem, user, key);
    char *body = e ? malloc(rec->body.len + 1) : NULL;
    if (!body)
        return STORE_ERROR;
    memcpy(body, rec->body.ptr, rec->body.len);
    free(e->body);
    e->body = body;
    e->rec = *rec;
    e->rec.body = (span_t){body, rec->body.len};
    e->present = e->dirty = true;
    return STORE_OK;
}

int pg_idem_sweep(store_write_t *w_, uint64_t now_ms, size_t limit, size_t *deleted)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    char now[PG_NUM_LEN], lim[PG_NUM_LEN];
    snprintf(now, sizeof now, "%" PRIu64, now_ms);
    snprintf(lim, sizeof lim, "%zu", limit);
    const char *p[] = {now, lim};
    int rc;
    /* SKIP LOCKED: a record another node's batch holds is that batch's; claims of the first builds (expiry 0) are left
     */
    PGresult *res = pg_wexec(w, "idem-sweep",
                             "WITH d AS (DELETE FROM tally_idem WHERE ctid = ANY(ARRAY(SELECT ctid FROM tally_idem"
                             " WHERE expires_ms > 0 AND expires_ms <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING 1)"
                             " SELECT count(*) FROM d",
                             2, p, &rc);
    *deleted = 0;
    if (!res)
        return rc;
    *deleted = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return STORE_OK;
}

int pg_idem_delete_user(store_write_t *w_, span_t user, size_t limit, size_t *deleted)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    char u[ID_MAX_LEN + 1], l[PG_NUM_LEN];
    pg_cstr(u, user);
    pg_num(l, limit);
    const char *p[] = {u, l};
    /* the records, then the user's claims up to what is left of the limit, in one statement */
    return pg_count_deleted(
        (pg_write_t *)w_, "delete-user-keys",
        "WITH d AS (DELETE FROM tally_idem WHERE \"user\" = $1 AND key IN (SELECT key FROM tally_idem"
        " WHERE \"user\" = $1 ORDER BY key LIMIT $2) RETURNING 1),"
        " c AS (DELETE FROM tally_claims WHERE \"user\" = $1 AND key IN (SELECT key FROM tally_claims"
        " WHERE \"user\" = $1 ORDER BY key LIMIT greatest($2::bigint - (SELECT count(*) FROM d), 0)) RETURNING 1)"
        " SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM c)",
        2, p, deleted);
}

int pg_read_idem(store_read_t *r_, store_idem_fn fn, void *arg)
{
    pg_read_t *r = (pg_read_t *)r_;
    int rc;
    PGresult *res = pg_rexec(r, "read-keys",
                             "SELECT \"user\", key, expires_ms, fingerprint, status, type, has_etag, etag_version, body"
                             " FROM tally_idem WHERE status <> 0 ORDER BY \"user\", key",
                             0, NULL, &rc);
    if (!res)
        return rc;
    for (int i = 0; i < PQntuples(res); i++) {
        store_idem_t rec = {
            .expires_ms = strtoull(PQgetvalue(res, i, 2), NULL, 10),
            .status = (uint16_t)strtoul(PQgetvalue(res, i, 4), NULL, 10),
            .type = (uint8_t)strtoul(PQgetvalue(res, i, 5), NULL, 10),
            .has_etag = PQgetvalue(res, i, 6)[0] == 't',
            .etag_version = strtoull(PQgetvalue(res, i, 7), NULL, 10),
            .body = {PQgetvalue(res, i, 8), (size_t)PQgetlength(res, i, 8)},
        };
        if (pg_hex_fingerprint(PQgetvalue(res, i, 3), (size_t)PQgetlength(res, i, 3), rec.fingerprint) != 0) {
            rc = STORE_ERROR;
            break;
        }
        if (fn(arg, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)},
               (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)}, &rec) != 0)
            break;
    }
    PQclear(res);
    return rc;
}
