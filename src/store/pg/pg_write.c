/* pg_write.c — the PostgreSQL store's write transaction: one database transaction per batch on the
 * writer's connection, and the fold's own transactions on the fold's connection (the same calls; a
 * pg_write_t per session). The batch's rows and idempotency records that exist are locked in one key
 * order up front (store_write_prepare), kept in a cache while the engine decides, and written back
 * at commit as a few multi-row statements. Those that did not exist are inserted at commit by a
 * plain INSERT: if another batch inserted one meanwhile, the INSERT waits for it and then fails
 * with a unique violation, and the batch is run again (STORE_RETRY), this time finding it. The
 * log's positions are taken last, from a one-row counter whose lock is held until the commit, so
 * they are gap-free and in commit order. */
#include "store/pg/pg_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/answer.h"
#include "core/clock.h"
#include "core/log.h"

/* A transaction of w (the writer's batches, or the fold) on its session's connection. */
static int write_begin(pg_write_t *w, store_write_t **out)
{
    assert(!w->active); /* one at a time on each session */
    if (!pg_session_conn(w->store, w->sess))
        return STORE_UNAVAILABLE;
    int prepared = pg_session_prepare(w->store, w->sess); /* what the last transactions sent as text */
    if (prepared != STORE_OK)
        return prepared;
    w->active = true;
    w->thread = pthread_self();
    w->began = false;
    w->log_count = 0;
    w->checkpoint_dirty = w->checkpoint_locked = w->aux_dirty = false;
    PQclear(w->fold_log);
    w->fold_log = NULL;
    pg_cache_clear(&w->rows);
    pg_cache_clear(&w->idem);
    pg_cache_clear(&w->voided);
    pg_cache_clear(&w->claims);
    w->asks = NULL;
    w->nasks = 0;
    w->counts.count = 0;
    if (w->counts.slots)
        memset(w->counts.slots, 0, w->counts.nslots * sizeof *w->counts.slots);
    w->lists.count = 0;
    if (w->lists.slots)
        memset(w->lists.slots, 0, w->lists.nslots * sizeof *w->lists.slots);
    *out = &w->base;
    return STORE_OK;
}

int pg_write_begin(store_t *s_, store_write_t **out)
{
    return write_begin(&((pg_store_t *)s_)->write, out);
}

/* The fold's transactions run on a connection of their own, beside the writer's batches: the fold
 * leader's session lock is held on it, and its statements (the counts, the lists) run on the
 * server in parallel with the next batch's instead of inside it. Its commits do not wait for the
 * WAL's flush (synchronous_commit off): a fold is derived from committed log entries and commits
 * its checkpoint with its counts, so a fold lost in a crash of the server is lost whole and is
 * folded again from the log — never twice, never half. Whatever depends on it durably comes after
 * it in the WAL (the sweep's pruning behind its checkpoint is a synchronous commit of the writer's,
 * whose flush includes it), so nothing durable can outlive it. Each batch's own synchronous flush
 * then carries the folds committed before it, instead of a second flush a batch. */
int pg_fold_begin(store_t *s_, store_write_t **out)
{
    return write_begin(&((pg_store_t *)s_)->fold, out);
}

void pg_write_abort(store_write_t *w_)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    PQclear(w->fold_log);
    w->fold_log = NULL;
    if (w->began)
        PQclear(PQexec(w->sess->conn, "ROLLBACK"));
    w->active = w->began = false;
}

/* --- locking the batch's rows and records --- */

static void pairs_arrays(const store_pair_t *p, size_t n, pg_buf_t *a, pg_buf_t *b)
{
    pg_buf_open(a);
    pg_buf_open(b);
    for (size_t i = 0; i < n; i++) {
        pg_buf_text_elem(a, p[i].a.ptr, p[i].a.len);
        pg_buf_text_elem(b, p[i].b.ptr, p[i].b.len);
    }
    pg_buf_close(a);
    pg_buf_close(b);
}

static void row_entry_fill(pg_write_t *w, const PGresult *res, int i, int first_col)
{
    span_t item = {PQgetvalue(res, i, first_col), (size_t)PQgetlength(res, i, first_col)};
    span_t user = {PQgetvalue(res, i, first_col + 1), (size_t)PQgetlength(res, i, first_col + 1)};
    pg_entry_t *e = pg_cache_put(&w->rows, item, user);
    if (!e)
        return; /* not cached: read again when asked */
    e->row.set = pg_cfg_set(w->store, strtol(PQgetvalue(res, i, first_col + 2), NULL, 10));
    e->row.version = strtoull(PQgetvalue(res, i, first_col + 3), NULL, 10);
    e->present = e->stored = true;
}

static int idem_entry_fill(pg_write_t *w, const PGresult *res, int i)
{
    span_t user = {PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)};
    span_t key = {PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)};
    pg_entry_t *e = pg_cache_put(&w->idem, user, key);
    if (!e)
        return STORE_ERROR;
    uint16_t status = (uint16_t)strtoul(PQgetvalue(res, i, 4), NULL, 10);
    e->stored = true;
    e->present = status != 0; /* 0: a claim (schema 1's first builds) that never stored an answer */
    if (!e->present)
        return STORE_OK;
    if (pg_hex_fingerprint(PQgetvalue(res, i, 3), (size_t)PQgetlength(res, i, 3), e->rec.fingerprint) != 0)
        return STORE_ERROR;
    e->rec.expires_ms = strtoull(PQgetvalue(res, i, 2), NULL, 10);
    e->rec.status = status;
    e->rec.type = (uint8_t)strtoul(PQgetvalue(res, i, 5), NULL, 10);
    e->rec.has_etag = PQgetvalue(res, i, 6)[0] == 't';
    e->rec.etag_version = strtoull(PQgetvalue(res, i, 7), NULL, 10);
    e->rec.cursor_ordinal = 0; /* stored complete */
    e->rec.counts_ask = 0;
    size_t len = (size_t)PQgetlength(res, i, 8);
    free(e->body);
    if (!(e->body = malloc(len + 1)))
        return STORE_ERROR;
    memcpy(e->body, PQgetvalue(res, i, 8), len);
    e->rec.body = (span_t){e->body, len};
    return STORE_OK;
}

#define IDEM_COLUMNS "\"user\", key, expires_ms, fingerprint, status, type, has_etag, etag_version, body"

/* The batch's existing records and rows, locked in key order. */
static const char LOCK_IDEM_SQL[] =
    "SELECT " IDEM_COLUMNS " FROM tally_idem WHERE (\"user\", key) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
    " ORDER BY 1, 2 FOR UPDATE";
static const char LOCK_ROWS_SQL[] =
    "SELECT item, \"user\", kind, version FROM tally_rows WHERE (item, \"user\") IN (SELECT * FROM unnest($1::text[], "
    "$2::text[])) ORDER BY 1, 2 FOR UPDATE";

/* The voided flags of users ($1), each read under a shared lock named as store_aux_read_locked names
 * the flag's record (a void holds it exclusively while it walks the user's rows): taken in one order,
 * then read by a statement of its own, which under READ COMMITTED sees a void committed while it
 * waited. */
static const char LOCK_VOID_SQL[] =
    "SELECT count(pg_advisory_xact_lock_shared(" PG_LOCK_AUX_SQL ", hashtext('" STORE_VOID_PREFIX "' || u)))"
    " FROM (SELECT DISTINCT u FROM unnest($1::text[]) AS t(u) ORDER BY u) x";
static const char READ_VOID_SQL[] =
    "SELECT substr(key, " PG_VOID_KEY_FROM ") FROM tally_aux WHERE key IN (SELECT '" STORE_VOID_PREFIX
    "' || u FROM unnest($1::text[]) AS t(u))";
/* A batch's rows locked as LOCK_ROWS_SQL does, and in the same statement (so after LOCK_VOID_SQL's
 * locks) the voided flags of its users ($3): rows with void false, then one line per voided user. */
static const char LOCK_ROWS_VOID_SQL[] =
    "WITH r AS (SELECT item, \"user\", kind, version FROM tally_rows WHERE (item, \"user\") IN (SELECT * FROM "
    "unnest($1::text[], $2::text[])) ORDER BY 1, 2 FOR UPDATE)"
    " SELECT item, \"user\", kind, version, false AS void FROM r UNION ALL SELECT '', substr(key, " PG_VOID_KEY_FROM
    "), 0, 0, true FROM tally_aux WHERE key IN (SELECT '" STORE_VOID_PREFIX "' || u FROM unnest($3::text[]) AS t(u))";

/* The users of rows (their b) as a text array. */
static void users_array(const store_pair_t *rows, size_t n, pg_buf_t *u)
{
    pg_buf_open(u);
    for (size_t i = 0; i < n; i++)
        pg_buf_text_elem(u, rows[i].b.ptr, rows[i].b.len);
    pg_buf_close(u);
}

/* Notes every user of users as read: voided when READ_VOID_SQL's res names them. */
static int voided_fill(pg_write_t *w, const PGresult *res, const span_t *users, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!pg_cache_put(&w->voided, users[i], (span_t){"", 0}))
            return STORE_ERROR;
    for (int i = 0; i < PQntuples(res); i++) {
        pg_entry_t *e =
            pg_cache_put(&w->voided, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)}, (span_t){"", 0});
        if (!e)
            return STORE_ERROR;
        e->present = true;
    }
    return STORE_OK;
}

int pg_user_voided(store_write_t *w_, span_t user, bool *voided)
{
    pg_write_t *w = (pg_write_t *)w_;
    pg_entry_t *e = pg_cache_find(&w->voided, user, (span_t){"", 0});
    if (!e) { /* a user the batch did not name: lock and read it now */
        pg_buf_t u = {0};
        store_pair_t pair = {{"", 0}, user};
        users_array(&pair, 1, &u);
        if (u.failed) {
            pg_buf_free(&u);
            return STORE_ERROR;
        }
        const char *p[] = {u.buf};
        int rc = pg_wrun(w, "lock-void", LOCK_VOID_SQL, 1, p);
        PGresult *res = rc == STORE_OK ? pg_wexec(w, "read-void", READ_VOID_SQL, 1, p, &rc) : NULL;
        pg_buf_free(&u);
        if (!res)
            return rc;
        rc = voided_fill(w, res, &user, 1);
        PQclear(res);
        if (rc != STORE_OK)
            return rc;
        e = pg_cache_find(&w->voided, user, (span_t){"", 0});
    }
    *voided = e && e->present;
    return STORE_OK;
}

/* Fills the cache from a locking read's rows (LOCK_ROWS_VOID_SQL's lines of voided users too). */
static int lock_read(pg_write_t *w, const PGresult *res, bool rows)
{
    int rc = STORE_OK;
    bool flags = rows && PQnfields(res) == 5;
    for (int i = 0; rc == STORE_OK && i < PQntuples(res); i++) {
        if (flags && PQgetvalue(res, i, 4)[0] == 't') {
            pg_entry_t *e = pg_cache_put(&w->voided, (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)},
                                         (span_t){"", 0});
            if (!e)
                rc = STORE_ERROR;
            else
                e->present = true;
        } else if (rows)
            row_entry_fill(w, res, i, 0);
        else
            rc = idem_entry_fill(w, res, i);
    }
    return rc;
}

/* Locks the pairs the cache does not know yet (not prepared); what is not found is absent (inserted
 * at commit if written at all). */
static int lock_missing(pg_write_t *w, const char *what, const char *lock_sql, pg_cache_t *cache,
                        const store_pair_t *pairs, size_t n, bool rows)
{
    store_pair_t *missing = NULL;
    size_t m = 0;
    int rc = STORE_OK;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        if (pg_cache_find(cache, pairs[i].a, pairs[i].b))
            continue;
        if (!missing && !(missing = malloc(n * sizeof *missing)))
            rc = STORE_ERROR;
        else
            missing[m++] = pairs[i];
    }
    if (rc == STORE_OK && m) {
        pg_buf_t a = {0}, b = {0};
        pairs_arrays(missing, m, &a, &b);
        const char *p[] = {a.buf, b.buf};
        PGresult *res = a.failed || b.failed ? NULL : pg_wexec(w, what, lock_sql, 2, p, &rc);
        if (res)
            rc = lock_read(w, res, rows);
        else if (rc == STORE_OK)
            rc = STORE_ERROR;
        PQclear(res);
        pg_buf_free(&a);
        pg_buf_free(&b);
    }
    for (size_t i = 0; rc == STORE_OK && i < m; i++)
        if (!pg_cache_put(cache, missing[i].a, missing[i].b))
            rc = STORE_ERROR;
    free(missing);
    return rc;
}

int pg_idem_lock(pg_write_t *w, span_t user, span_t key)
{
    store_pair_t pair = {user, key};
    return lock_missing(w, "lock-key", LOCK_IDEM_SQL, &w->idem, &pair, 1, false);
}

/* The leader's fold, read with the batch's rows: the checkpoint, locked (after the rows: the one
 * order of locks), then the entries after it. In READ COMMITTED each statement reads its own
 * snapshot, taken when it starts: the scan starts after the lock is granted, so its subquery reads
 * the very value the lock returned (nobody else can change it while it is held) — the same read as
 * a scan sent with that value after the lock's answer, one round trip earlier. */
static const char FOLD_CHECKPOINT_SQL[] = "SELECT checkpoint FROM tally_pipeline WHERE id = 1 FOR UPDATE";
#define FOLD_CHECKPOINT_VALUE "coalesce((SELECT checkpoint FROM tally_pipeline WHERE id = 1), 0)"
static const char FOLD_SCAN_SQL[] = "SELECT " PG_LOG_COLUMNS " FROM tally_log WHERE seq > " FOLD_CHECKPOINT_VALUE
                                    " AND seq <= " FOLD_CHECKPOINT_VALUE " + $1::bigint ORDER BY seq LIMIT $1::bigint";

int pg_write_prepare(store_write_t *w_, const store_pair_t *rows, size_t nrows, const store_pair_t *keys, size_t nkeys,
                     const store_pair_t *claims, size_t nclaims, size_t fold_scan)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_store_t *s = w->store;
    /* only the leader locks the checkpoint (pg_checkpoint_get); a fold read before is not read again */
    bool fold = fold_scan > 0 && w->sess->leader && !w->checkpoint_dirty && !w->checkpoint_locked && !w->fold_log;
    if (!nrows && !nkeys && !nclaims && !fold)
        return STORE_OK;
    /* One order for everything a batch locks: idempotency records, then rows, each in key order;
     * then the checkpoint (the leader's fold), then the claims (store_claims_apply), then (at commit)
     * counts in key order and the log's head last. BEGIN, the locking reads and the fold's two reads
     * go in one round trip. */
    pg_buf_t ka = {0}, kb = {0}, ra = {0}, rb = {0}, ua = {0};
    pairs_arrays(keys, nkeys, &ka, &kb);
    pairs_arrays(rows, nrows, &ra, &rb);
    users_array(rows, nrows, &ua);
    if (ka.failed || kb.failed || ra.failed || rb.failed || ua.failed) {
        pg_buf_free(&ka), pg_buf_free(&kb), pg_buf_free(&ra), pg_buf_free(&rb), pg_buf_free(&ua);
        return STORE_ERROR;
    }
    char scan[PG_NUM_LEN];
    snprintf(scan, sizeof scan, "%zu", fold_scan > INT64_MAX ? (size_t)INT64_MAX : fold_scan);
    const char *kp[] = {ka.buf, kb.buf}, *rp[] = {ra.buf, rb.buf, ua.buf}, *up[] = {ua.buf}, *fp[] = {scan};
    bool send_begin = !w->began;
    int rc = pg_pipe_enter(s, w->sess->conn);
    bool entered = rc == STORE_OK;
    if (rc == STORE_OK && send_begin)
        rc = pg_pipe_send(s, w->sess->conn, "BEGIN ISOLATION LEVEL READ COMMITTED", 0, NULL);
    if (rc == STORE_OK && nkeys)
        rc = pg_pipe_send_session(s, w->sess, LOCK_IDEM_SQL, 2, kp);
    if (rc == STORE_OK && nrows)
        rc = pg_pipe_send_session(s, w->sess, LOCK_VOID_SQL, 1, up);
    if (rc == STORE_OK && nrows)
        rc = pg_pipe_send_session(s, w->sess, LOCK_ROWS_VOID_SQL, 3, rp);
    if (rc == STORE_OK && fold)
        rc = pg_pipe_send_session(s, w->sess, FOLD_CHECKPOINT_SQL, 0, NULL);
    if (rc == STORE_OK && fold)
        rc = pg_pipe_send_session(s, w->sess, FOLD_SCAN_SQL, 1, fp);
    bool claims_sent = false;
    if (rc == STORE_OK && nclaims)
        rc = pg_claims_lock_send(w, claims, nclaims, &claims_sent);
    pg_buf_free(&ka), pg_buf_free(&kb), pg_buf_free(&ra), pg_buf_free(&rb), pg_buf_free(&ua);
    if (rc == STORE_OK)
        rc = pg_pipe_sync(s, w->sess->conn);
    if (rc == STORE_OK && send_begin) {
        PQclear(pg_pipe_result(s, w->sess->conn, "begin", &rc));
        w->began = rc == STORE_OK;
    }
    for (int part = 0; part < 2 && rc == STORE_OK; part++) {
        if (part == 0 ? !nkeys : !nrows)
            continue;
        if (part == 1) { /* the users' voided locks first; their flags come with the rows */
            PQclear(pg_pipe_result(s, w->sess->conn, "lock-void", &rc));
            for (size_t i = 0; rc == STORE_OK && i < nrows; i++)
                if (!pg_cache_put(&w->voided, rows[i].b, (span_t){"", 0}))
                    rc = STORE_ERROR;
            if (rc != STORE_OK)
                break;
        }
        PGresult *res = pg_pipe_result(s, w->sess->conn, part == 0 ? "lock-keys" : "lock-rows", &rc);
        if (res)
            rc = lock_read(w, res, part == 1);
        PQclear(res);
    }
    if (rc == STORE_OK && fold) {
        PGresult *res = pg_pipe_result(s, w->sess->conn, "checkpoint", &rc);
        if (res) {
            w->checkpoint = PQntuples(res) == 1 ? strtoull(PQgetvalue(res, 0, 0), NULL, 10) : 0;
            w->checkpoint_locked = true;
        }
        PQclear(res);
    }
    if (rc == STORE_OK && fold) {
        w->fold_log = pg_pipe_result(s, w->sess->conn, "log-scan", &rc);
        w->fold_scan = fold_scan;
    }
    if (rc == STORE_OK && nclaims)
        rc = pg_claims_lock_read(w, claims, nclaims, claims_sent);
    if (entered) {
        int left = pg_pipe_leave(s, w->sess->conn);
        if (rc == STORE_OK)
            rc = left;
    }
    w->began = w->began || (send_begin && PQtransactionStatus(w->sess->conn) != PQTRANS_IDLE);
    /* what was not found does not exist yet: absent, inserted at commit if written */
    for (size_t i = 0; rc == STORE_OK && i < nkeys; i++)
        if (!pg_cache_put(&w->idem, keys[i].a, keys[i].b))
            rc = STORE_ERROR;
    for (size_t i = 0; rc == STORE_OK && i < nrows; i++)
        if (!pg_cache_put(&w->rows, rows[i].a, rows[i].b))
            rc = STORE_ERROR;
    return rc;
}

bool pg_write_may_fold(store_write_t *w_)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_store_t *s = w->store;
    if (w != &s->fold)
        return false; /* the writer's batches never fold: the fold has a session of its own */
    uint64_t now = clock_ms(CLOCK_MONOTONIC);
    if (w->sess->leader || now - w->sess->leader_tried_ms < PG_FOLD_TRY_MS)
        return w->sess->leader;
    w->sess->leader_tried_ms = now;
    int rc;
    /* session-level: held while this connection lives, whatever becomes of the transaction */
    PGresult *res =
        pg_exec(s, w->sess->conn, "fold-lock", "SELECT pg_try_advisory_lock(" PG_LOCK_FOLD_SQL ")", 0, NULL, &rc);
    w->sess->leader = res && PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (w->sess->leader)
        log_line("level=info event=fold-leader");
    return w->sess->leader;
}

/* --- rows --- */

int pg_row_get(store_write_t *w_, span_t item, span_t user, reaction_row_t *row)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_entry_t *e = pg_cache_find(&w->rows, item, user);
    if (e) {
        *row = e->present ? e->row : (reaction_row_t){KIND_NONE, 0};
        return STORE_OK;
    }
    store_pair_t pair = {item, user}; /* not prepared: lock it now */
    int rc = lock_missing(w, "lock-row", LOCK_ROWS_SQL, &w->rows, &pair, 1, true);
    if (rc != STORE_OK)
        return rc;
    e = pg_cache_find(&w->rows, item, user);
    *row = e && e->present ? e->row : (reaction_row_t){KIND_NONE, 0};
    return STORE_OK;
}

int pg_row_put(store_write_t *w_, span_t item, span_t user, const reaction_row_t *row)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_entry_t *e = pg_cache_put(&w->rows, item, user);
    if (!e)
        return STORE_ERROR;
    e->row = *row;
    e->present = true;
    e->dirty = true;
    return STORE_OK;
}

/* --- the log --- */

int pg_log_append(store_write_t *w_, const transition_t *t, uint64_t *seq)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    if (t->item.len > 255 || t->user.len > 255)
        return STORE_ERROR;
    if (w->log_count == w->log_cap) {
        size_t cap = w->log_cap ? w->log_cap * 2 : 256;
        pg_logged_t *log = realloc(w->log, cap * sizeof *log);
        if (!log)
            return STORE_ERROR;
        w->log = log;
        w->log_cap = cap;
    }
    pg_logged_t *l = &w->log[w->log_count++];
    memcpy(l->item, t->item.ptr, t->item.len);
    memcpy(l->user, t->user.ptr, t->user.len);
    l->item_len = (uint8_t)t->item.len;
    l->user_len = (uint8_t)t->user.len;
    l->from = pg_db_set(w->store, t->from);
    l->to = pg_db_set(w->store, t->to);
    l->version = transition_version_pack(t); /* with the uncounted bits */
    l->at_ms = t->at_ms;
    l->seq = 0;
    *seq = 0; /* taken at commit, in commit order */
    return STORE_OK;
}

int pg_log_put(store_write_t *w_, uint64_t seq, const transition_t *t)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    uint64_t none;
    if (seq == 0 || (w->log_count && (w->log[w->log_count - 1].seq == 0 || w->log[w->log_count - 1].seq >= seq)))
        return STORE_ERROR; /* positions given rise, and are not mixed with positions taken at commit */
    int rc = pg_log_append(w_, t, &none);
    if (rc == STORE_OK)
        w->log[w->log_count - 1].seq = seq;
    return rc;
}

int pg_log_scan(store_write_t *w_, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    if (w->fold_log) { /* read with the batch's rows: the same scan, if this is it (once) */
        PGresult *res = w->fold_log;
        w->fold_log = NULL;
        bool same = w->checkpoint_locked && after == w->checkpoint && limit == w->fold_scan;
        int rc = same ? pg_log_rows(w->store, res, fn, arg) : STORE_OK;
        PQclear(res);
        if (same)
            return rc;
    }
    char a[PG_NUM_LEN], l[PG_NUM_LEN], h[PG_NUM_LEN];
    snprintf(a, sizeof a, "%" PRIu64, after);
    snprintf(l, sizeof l, "%zu", limit > INT64_MAX ? (size_t)INT64_MAX : limit);
    snprintf(h, sizeof h, "%" PRIu64, pg_log_range_end(after, limit));
    const char *p[] = {a, l, h};
    int rc;
    PGresult *res = pg_wexec(w, "log-scan", PG_LOG_RANGE_SQL, 3, p, &rc);
    if (!res)
        return rc;
    rc = pg_log_rows(w->store, res, fn, arg);
    PQclear(res);
    return rc;
}

/* --- counts and the checkpoint --- */

int pg_counts_add(store_write_t *w_, span_t item, const int64_t deltas[KINDS_MAX + 1])
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    itemmap_entry_t *e = itemmap_get(&w->counts, item);
    if (!e)
        return STORE_ERROR;
    for (int k = 0; k <= w->store->kinds.count; k++) /* [0]: the reactors (flushed in many mode) */
        e->deltas[k] += deltas[k];
    return STORE_OK;
}

int pg_counts_folded(store_write_t *w_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    pg_write_t *w = (pg_write_t *)w_;
    pg_store_t *s = w->store;
    char buf[ID_MAX_LEN + 1];
    if (item.len > ID_MAX_LEN)
        return STORE_ERROR;
    memcpy(buf, item.ptr, item.len);
    buf[item.len] = '\0';
    const char *p[] = {buf};
    int rc;
    PGresult *res = pg_wexec(w, "counts", "SELECT kind, n FROM tally_counts WHERE item = $1", 1, p, &rc);
    if (!res)
        return rc;
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    int64_t sum = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        long d = strtol(PQgetvalue(res, i, 0), NULL, 10);
        int64_t n = strtoll(PQgetvalue(res, i, 1), NULL, 10);
        if (d == 0)
            counts[KIND_NONE] = n;
        else if (d > 0 && d <= s->db_kinds && s->db_to_cfg[d] >= 1)
            counts[s->db_to_cfg[d]] = n, sum += n;
    }
    if (s->kinds.mode == REACTION_MODE_ONE) /* one kind per user: the reactors are the sum */
        counts[KIND_NONE] = sum;
    PQclear(res);
    return STORE_OK;
}

int pg_counts_at_commit(store_write_t *w_, store_counts_ask_t *asks, size_t n)
{
    pg_write_t *w = (pg_write_t *)w_;
    if (w->asks)
        return STORE_ERROR; /* one call per transaction */
    if (n && !w->sess->asks_prepared) {
        /* once a connection (it is kept while it lives): planned once, not with every batch */
        static const char *const stmts[][2] = {{PG_ASKS_STMT, PG_ASKS_SQL}, {PG_ASKS_ROWS_STMT, PG_ASKS_ROWS_SQL}};
        for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
            PGresult *res = PQprepare(w->sess->conn, stmts[i][0], stmts[i][1], 0, NULL);
            int rc = res && PQresultStatus(res) == PGRES_COMMAND_OK
                         ? STORE_OK
                         : pg_result_rc(w->store, w->sess->conn, res, "prepare-asks");
            PQclear(res);
            if (rc != STORE_OK)
                return rc;
        }
        w->sess->asks_prepared = true;
    }
    w->asks = n ? asks : NULL;
    w->nasks = n;
    for (size_t i = 0; i < n; i++)
        asks[i].filled = false;
    return STORE_OK;
}

int pg_checkpoint_get(store_write_t *w_, uint64_t *seq)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    if (w->checkpoint_dirty || w->checkpoint_locked) { /* moved, or read under its lock: it cannot change */
        *seq = w->checkpoint;
        return STORE_OK;
    }
    int rc;
    /* The leader locks the checkpoint for its fold: even two nodes that both believed they lead
     * would fold one after the other, each from where the other stopped. */
    bool lock = w->sess->leader;
    PGresult *res =
        pg_wexec(w, "checkpoint", lock ? FOLD_CHECKPOINT_SQL : "SELECT checkpoint FROM tally_pipeline WHERE id = 1", 0,
                 NULL, &rc);
    if (!res)
        return rc;
    *seq = PQntuples(res) == 1 ? strtoull(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    PQclear(res);
    w->checkpoint = *seq;
    w->checkpoint_locked = lock;
    return STORE_OK;
}

int pg_checkpoint_put(store_write_t *w_, uint64_t seq)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    w->checkpoint = seq;
    w->checkpoint_dirty = true;
    return STORE_OK;
}

/* --- pruning the log, auxiliary records --- */

int pg_log_prune(store_write_t *w_, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    char u[PG_NUM_LEN], b[PG_NUM_LEN], l[PG_NUM_LEN];
    pg_num(u, upto_seq);
    pg_num(b, before_ms > INT64_MAX ? INT64_MAX : before_ms);
    pg_num(l, limit);
    const char *p[] = {u, b, l};
    /* the oldest first, stopping at the first one too young (as on the embedded store); the newest
     * position pruned is kept with it (STORE_LOG_PRUNED_KEY: the log may have gaps) */
    return pg_count_deleted((pg_write_t *)w_, "log-prune",
                            "WITH c AS (SELECT seq, at_ms FROM tally_log WHERE seq <= $1 ORDER BY seq LIMIT $3),"
                            " stop AS (SELECT coalesce(min(seq), 9223372036854775807) AS s FROM c WHERE at_ms >= $2),"
                            " d AS (DELETE FROM tally_log WHERE seq IN (SELECT seq FROM c, stop WHERE seq < stop.s)"
                            " RETURNING seq),"
                            " m AS (INSERT INTO tally_aux SELECT '" STORE_LOG_PRUNED_KEY
                            "', convert_to(max(seq)::text, 'UTF8')"
                            " FROM d HAVING count(*) > 0 ON CONFLICT (key) DO UPDATE SET value = excluded.value)"
                            " SELECT count(*) FROM d",
                            3, p, deleted);
}

/* A voided flag written in the transaction: what store_user_voided answers from now on in it. */
static void note_void_flag(pg_write_t *w, span_t key, bool voided)
{
    size_t plen = sizeof STORE_VOID_PREFIX - 1;
    if (key.len <= plen || memcmp(key.ptr, STORE_VOID_PREFIX, plen) != 0)
        return;
    pg_entry_t *e = pg_cache_put(&w->voided, (span_t){key.ptr + plen, key.len - plen}, (span_t){"", 0});
    if (e)
        e->present = voided;
}

int pg_aux_put(store_write_t *w_, span_t key, span_t value)
{
    note_void_flag((pg_write_t *)w_, key, true);
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    char k[512];
    snprintf(k, sizeof k, "%.*s", (int)(key.len < 511 ? key.len : 511), key.ptr);
    const char *p[] = {k, value.ptr};
    int lengths[] = {0, (int)value.len}, formats[] = {0, 1};
    int rc;
    PQclear(pg_wexec(w, "aux", "SELECT 1", 0, NULL, &rc)); /* begins the transaction */
    if (rc != STORE_OK)
        return rc;
    w->aux_dirty = true;
    PGresult *res = PQexecParams(w->sess->conn,
                                 "INSERT INTO tally_aux VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = "
                                 "excluded.value",
                                 2, NULL, p, lengths, formats, 0);
    rc = res && PQresultStatus(res) == PGRES_COMMAND_OK ? STORE_OK : pg_result_rc(w->store, w->sess->conn, res, "aux");
    PQclear(res);
    return rc;
}

/* A transaction-scoped advisory lock named by the prefix (held to the commit, so the next
 * decider's statement starts after this one's commit is visible: READ COMMITTED), then the records. */
int pg_aux_read_locked(store_write_t *w_, span_t prefix, store_aux_fn fn, void *arg)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    char pre[512];
    snprintf(pre, sizeof pre, "%.*s", (int)(prefix.len < 511 ? prefix.len : 511), prefix.ptr);
    const char *p[] = {pre};
    int rc = pg_wrun(w, "aux-lock", "SELECT pg_advisory_xact_lock(" PG_LOCK_AUX_SQL ", hashtext($1))", 1, p);
    if (rc != STORE_OK)
        return rc;
    return pg_aux_rows(w->store, w->sess->conn, "aux-read", p, fn, arg);
}

int pg_aux_delete_range(store_write_t *w_, span_t from, span_t to)
{
    note_void_flag((pg_write_t *)w_, from, false); /* a restore deletes the one record */
    PG_WRITE_CHECK((pg_write_t *)w_);
    char f[512], t[512];
    snprintf(f, sizeof f, "%.*s", (int)(from.len < 511 ? from.len : 511), from.ptr);
    snprintf(t, sizeof t, "%.*s", (int)(to.len < 511 ? to.len : 511), to.ptr);
    const char *p[] = {f, t};
    return pg_wrun((pg_write_t *)w_, "aux-delete", "DELETE FROM tally_aux WHERE key >= $1 AND key < $2", 2, p);
}

/* --- commit: the cached writes as multi-row statements, the log last --- */

/* The dirty rows that were stored (an update of locked rows) or not (a plain insert: a row that
 * another batch inserted meanwhile fails it with a unique violation, and the batch runs again). */
static int flush_rows_part(pg_write_t *w, bool stored)
{
    pg_buf_t items = {0}, users = {0}, kinds = {0}, versions = {0};
    pg_buf_open(&items), pg_buf_open(&users), pg_buf_open(&kinds), pg_buf_open(&versions);
    size_t n = 0;
    for (size_t i = 0; i < w->rows.count; i++) {
        const pg_entry_t *e = &w->rows.entries[i];
        if (!e->dirty || e->stored != stored)
            continue;
        pg_buf_text_elem(&items, e->a, e->alen);
        pg_buf_text_elem(&users, e->b, e->blen);
        pg_buf_int_elem(&kinds, pg_db_set(w->store, e->row.set));
        pg_buf_int_elem(&versions, (long long)e->row.version);
        n++;
    }
    pg_buf_close(&items), pg_buf_close(&users), pg_buf_close(&kinds), pg_buf_close(&versions);
    int rc = items.failed || users.failed || kinds.failed || versions.failed ? STORE_ERROR : STORE_OK;
    if (rc == STORE_OK && n) {
        const char *p[] = {items.buf, users.buf, kinds.buf, versions.buf};
        rc = pg_wrun(w, "write-rows",
                     stored ? "UPDATE tally_rows r SET kind = t.k, version = t.v FROM unnest($1::text[], $2::text[],"
                              " $3::int4[], $4::int8[]) AS t(i, u, k, v) WHERE r.item = t.i AND r.\"user\" = t.u"
                            : "INSERT INTO tally_rows SELECT * FROM unnest($1::text[], $2::text[], $3::int4[],"
                              " $4::int8[])",
                     4, p);
    }
    pg_buf_free(&items), pg_buf_free(&users), pg_buf_free(&kinds), pg_buf_free(&versions);
    return rc;
}

static int flush_rows(pg_write_t *w)
{
    int rc = flush_rows_part(w, true);
    return rc == STORE_OK ? flush_rows_part(w, false) : rc;
}

#define IDEM_UNNEST                                                                                                    \
    "SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int4[], $6::int4[], $7::bool[],"         \
    " $8::int8[], $9::text[])"
static const char INSERT_IDEM_SQL[] = "INSERT INTO tally_idem " IDEM_UNNEST;
/* a replaced record's columns (here and in PG_ASKS_SQL) */
#define IDEM_REPLACE_SET                                                                                               \
    " expires_ms = excluded.expires_ms, fingerprint = excluded.fingerprint, status = excluded.status,"                 \
    " type = excluded.type, has_etag = excluded.has_etag, etag_version = excluded.etag_version, body = excluded.body"
static const char REPLACE_IDEM_SQL[] =
    "INSERT INTO tally_idem " IDEM_UNNEST " ON CONFLICT (\"user\", key) DO UPDATE SET" IDEM_REPLACE_SET;

/* A record written by the batch whose answer's counts come at commit: the answers' statement inserts
 * it, complete (flush_asks), instead of an insert here and an update of its body there. */
static bool idem_by_asks(const pg_write_t *w, const pg_entry_t *e)
{
    return e->dirty && e->present && e->rec.counts_ask && e->rec.counts_ask <= w->nasks;
}

static void fingerprint_hex(const uint8_t *fingerprint, char out[2 * FINGERPRINT_LEN + 1])
{
    for (size_t k = 0; k < FINGERPRINT_LEN; k++)
        snprintf(out + 2 * k, 3, "%02x", fingerprint[k]);
}

/* The dirty records that were stored (replaced: an expired record, or a claim of schema 1's first
 * builds) or not (a plain insert, as for rows). */
static int flush_idem_part(pg_write_t *w, bool stored)
{
    enum { U, K, EXP, FP, ST, TY, HE, EV, BODY, NCOL };
    pg_buf_t col[NCOL] = {0};
    for (int c = 0; c < NCOL; c++)
        pg_buf_open(&col[c]);
    size_t n = 0;
    for (size_t i = 0; i < w->idem.count; i++) {
        const pg_entry_t *e = &w->idem.entries[i];
        if (!e->dirty || e->stored != stored || idem_by_asks(w, e))
            continue;
        char fp[2 * FINGERPRINT_LEN + 1];
        fingerprint_hex(e->rec.fingerprint, fp);
        pg_buf_text_elem(&col[U], e->a, e->alen);
        pg_buf_text_elem(&col[K], e->b, e->blen);
        pg_buf_int_elem(&col[EXP], (long long)e->rec.expires_ms);
        pg_buf_text_elem(&col[FP], fp, 2 * FINGERPRINT_LEN);
        pg_buf_int_elem(&col[ST], e->rec.status);
        pg_buf_int_elem(&col[TY], e->rec.type);
        pg_buf_text_elem(&col[HE], e->rec.has_etag ? "t" : "f", 1);
        pg_buf_int_elem(&col[EV], (long long)e->rec.etag_version);
        pg_buf_text_elem(&col[BODY], e->rec.body.ptr, e->rec.body.len);
        n++;
    }
    int rc = STORE_OK;
    for (int c = 0; c < NCOL; c++) {
        pg_buf_close(&col[c]);
        if (col[c].failed)
            rc = STORE_ERROR;
    }
    if (rc == STORE_OK && n) {
        const char *p[NCOL];
        for (int c = 0; c < NCOL; c++)
            p[c] = col[c].buf;
        rc = pg_wrun(w, "write-keys", stored ? REPLACE_IDEM_SQL : INSERT_IDEM_SQL, NCOL, p);
    }
    for (int c = 0; c < NCOL; c++)
        pg_buf_free(&col[c]);
    return rc;
}

static int flush_idem(pg_write_t *w)
{
    int rc = flush_idem_part(w, true);
    return rc == STORE_OK ? flush_idem_part(w, false) : rc;
}

static int flush_counts(pg_write_t *w)
{
    pg_buf_t items = {0}, kinds = {0}, deltas = {0};
    pg_buf_open(&items), pg_buf_open(&kinds), pg_buf_open(&deltas);
    size_t n = 0;
    for (size_t i = 0; i < w->counts.count; i++) {
        const itemmap_entry_t *e = &w->counts.entries[i];
        /* [0], the reactors, is kept in many mode only (in one mode it is the sum of the counts) */
        int first = w->store->kinds.mode == REACTION_MODE_MANY ? KIND_NONE : 1;
        for (int k = first; k <= w->store->kinds.count; k++) {
            if (!e->deltas[k])
                continue;
            pg_buf_text_elem(&items, e->item, e->item_len);
            pg_buf_int_elem(&kinds, w->store->cfg_to_db[k]);
            pg_buf_int_elem(&deltas, (long long)e->deltas[k]);
            n++;
        }
    }
    pg_buf_close(&items), pg_buf_close(&kinds), pg_buf_close(&deltas);
    int rc = items.failed || kinds.failed || deltas.failed ? STORE_ERROR : STORE_OK;
    if (rc == STORE_OK && n) {
        const char *p[] = {items.buf, kinds.buf, deltas.buf};
        /* In key order, like every other lock. A count that went negative (a bug, or bad data) fails
         * the statement, so the pipelined COMMIT after it cannot commit: the cast of a text to int
         * is an error only when such a row exists (NULL casts to NULL). */
        rc = pg_wrun(w, "write-counts",
                     "WITH up AS (INSERT INTO tally_counts SELECT * FROM unnest($1::text[], $2::int4[], $3::int8[])"
                     " AS t(item, kind, n) ORDER BY item COLLATE \"C\", kind ON CONFLICT (item, kind)"
                     " DO UPDATE SET n = tally_counts.n + excluded.n RETURNING item, n)"
                     " SELECT (SELECT 'count-below-zero:' || item FROM up WHERE n < 0 LIMIT 1)::int",
                     3, p);
    }
    pg_buf_free(&items), pg_buf_free(&kinds), pg_buf_free(&deltas);
    return rc;
}

/* The batch's positions are base + 1 … base + n, known only here (entries at positions given by
 * log_put keep them, and the head moves past the highest, so base is above them): the idempotency records written by
 * this batch whose answer reports a transition's cursor get it spliced in by the same statement, in
 * the same commit (answer_set_cursor's splice, in SQL), and base comes back (pg_write_commit_at). */
static int flush_log(pg_write_t *w)
{
    if (!w->log_count)
        return STORE_OK;
    size_t given = 0; /* entries at positions given (log_put), the first ones; the head moves past them */
    uint64_t top = 0;
    enum { N, ITEM, USER, FROM, TO, VERSION, AT, CU, CK, CN, GIVEN, TOP, NGIVEN, NCOL };
    pg_buf_t col[NCOL] = {0};
    for (int c = ITEM; c <= GIVEN; c++)
        pg_buf_open(&col[c]);
    for (size_t i = 0; i < w->idem.count; i++) {
        const pg_entry_t *e = &w->idem.entries[i];
        if (!e->dirty || !e->present || !e->rec.cursor_ordinal || e->rec.counts_ask)
            continue; /* (one whose counts come at commit gets its cursor with them: flush_asks) */
        pg_buf_text_elem(&col[CU], e->a, e->alen);
        pg_buf_text_elem(&col[CK], e->b, e->blen);
        pg_buf_int_elem(&col[CN], e->rec.cursor_ordinal);
    }
    for (size_t i = 0; i < w->log_count; i++) {
        const pg_logged_t *l = &w->log[i];
        pg_buf_text_elem(&col[ITEM], l->item, l->item_len);
        pg_buf_text_elem(&col[USER], l->user, l->user_len);
        pg_buf_int_elem(&col[FROM], l->from);
        pg_buf_int_elem(&col[TO], l->to);
        pg_buf_int_elem(&col[VERSION], (long long)l->version);
        pg_buf_int_elem(&col[AT], (long long)l->at_ms);
        pg_buf_int_elem(&col[GIVEN], (long long)l->seq);
        if (l->seq) { /* given (log_put): they rise, and come before any taken here */
            given++;
            top = l->seq;
        }
    }
    int rc = STORE_OK;
    for (int c = ITEM; c <= GIVEN; c++) {
        pg_buf_close(&col[c]);
        if (col[c].failed)
            rc = STORE_ERROR;
    }
    char count[PG_NUM_LEN], top_text[PG_NUM_LEN], given_text[PG_NUM_LEN];
    snprintf(count, sizeof count, "%zu", w->log_count - given);
    snprintf(top_text, sizeof top_text, "%" PRIu64, top);
    snprintf(given_text, sizeof given_text, "%zu", given);
    const char *p[NCOL] = {count};
    for (int c = ITEM; c <= GIVEN; c++)
        p[c] = col[c].buf;
    p[TOP] = top_text;
    p[NGIVEN] = given_text;
    /* The head's row lock is held until COMMIT: the next batch takes its positions only after this
     * one is committed and visible, so positions are gap-free and in commit order. */
    if (rc == STORE_OK)
        rc = pg_wrun(
            w, "write-log",
            "WITH h AS (UPDATE tally_log_head SET seq = greatest(seq, $12::bigint) + $1::bigint WHERE id = 1"
            " RETURNING seq - $1::bigint AS base),"
            " l AS (INSERT INTO tally_log SELECT CASE WHEN t.s > 0 THEN t.s ELSE h.base + t.n - $13::bigint END,"
            " t.item, t.u, t.f, t.t, t.v, t.at FROM h,"
            " unnest($2::text[], $3::text[], $4::int4[], $5::int4[], $6::int8[], $7::int8[], $11::int8[])"
            " WITH ORDINALITY AS t(item, u, f, t, v, at, s, n)),"
            " c AS (UPDATE tally_idem i SET body = left(i.body, -1) || ',\"cursor\":\"' || (h.base + c.n) || '\"}'"
            " FROM h, unnest($8::text[], $9::text[], $10::int8[]) AS c(u, k, n) WHERE i.\"user\" = c.u AND i.key = c.k)"
            " SELECT base FROM h",
            NCOL, p);
    if (rc == STORE_OK)
        w->log_result = w->piped_count; /* its result's place in the pipeline, counted from 1 */
    for (int c = ITEM; c <= GIVEN; c++)
        pg_buf_free(&col[c]);
    return rc;
}

/* The answers' counts (pg_counts_at_commit), sent after the log's statement: that one holds the head's
 * row lock, so this statement's snapshot, taken when it starts, sees every position up to the batch's
 * base committed (a batch before holds the lock until its commit is visible), and the counts with the
 * checkpoint they were folded to. Without entries of its own the batch holds no lock; its snapshot
 * still sees a whole prefix of the log, as positions are taken in commit order. Once per item of the
 * asks ($2): the counts record plus the entries in (checkpoint, base] as they count — returned, and
 * each answer's own deltas added in C (asks_read). The records the batch writes whose answers carry
 * counts are inserted here, complete: their body gets answer_set_cursor's and answer_set_counts's
 * splices (answer_counts_format), with the item's counts plus the answer's own deltas ($4). */
_Static_assert(TRANSITION_VERSION_BITS == 60 && TRANSITION_UNCOUNTED_BEFORE == 1 && TRANSITION_UNCOUNTED_AFTER == 2,
               "PG_ASKS_SQL decodes the counted bits as transition_version_unpack does");
const char PG_ASKS_SQL[] =
    "WITH it AS (SELECT * FROM unnest($2::text[]) WITH ORDINALITY AS it(item, j)),"
    /* each side as it counts (transition_deltas_add): the two bits of the stored version above
     * TRANSITION_VERSION_BITS say the row did not count before (1) or after (2) the entry
     * (transition_version_unpack); such a side is taken as none. The bounds as scalar subqueries:
     * known when the scan starts, so it is one range of the key */
    " l AS MATERIALIZED (SELECT item, CASE WHEN (version >> 60) & 1 = 0 THEN from_kind ELSE 0 END AS f,"
    "  CASE WHEN (version >> 60) & 2 = 0 THEN to_kind ELSE 0 END AS t FROM tally_log"
    "  WHERE seq > coalesce((SELECT checkpoint FROM tally_pipeline WHERE id = 1), 0)"
    "  AND seq <= (SELECT seq - $1::bigint FROM tally_log_head WHERE id = 1) AND item = ANY($2::text[])),"
    /* per item and number ($3: the kinds' codes in the splice's order, -1 the reactors): its counts
     * record plus its unfolded entries. Set-wise (one scan of the counts' key for every item, then
     * hash joins of a few rows): a lookup per item and number costs more than the rest of the statement */
    " kd AS (SELECT * FROM unnest($3::int4[]) WITH ORDINALITY AS kd(code, o)),"
    " c AS MATERIALIZED (SELECT item, kind, n FROM tally_counts WHERE item = ANY($2::text[])),"
    " x AS (SELECT c.item, kd.o, c.n AS d FROM c JOIN kd ON c.kind = greatest(kd.code, 0)"
    "  UNION ALL SELECT l.item, kd.o, CASE WHEN kd.code < 0 THEN (l.t <> 0)::int - (l.f <> 0)::int"
    "   ELSE (CASE WHEN l.t >= 0 THEN (l.t = kd.code)::int ELSE ((-l.t) >> kd.code) & 1 END)"
    "   - (CASE WHEN l.f >= 0 THEN (l.f = kd.code)::int ELSE ((-l.f) >> kd.code) & 1 END) END FROM l, kd),"
    " s AS (SELECT item, o, sum(d) AS n FROM x GROUP BY item, o),"
    " b AS MATERIALIZED (SELECT it.j, array_agg(coalesce(s.n, 0) ORDER BY kd.o) AS v FROM it CROSS JOIN kd"
    "  LEFT JOIN s ON s.item = it.item AND s.o = kd.o GROUP BY it.j),"
    /* each record's numbers ($4, the records' deltas one after the other, cardinality($3) each): its
     * item's plus its own, as one aggregate (a subquery per record costs more than the statement) */
    " d AS (SELECT (d.n - 1) / cardinality($3::int4[]) + 1 AS i, (d.n - 1) % cardinality($3::int4[]) + 1 AS o, d.d"
    "  FROM unnest($4::int8[]) WITH ORDINALITY AS d(d, n)),"
    /* the records: their item's place in $2, their columns, the cursor's ordinal, stored (replaced) or not */
    " k AS MATERIALIZED (SELECT k.u, k.key, k.exp, k.fp, k.st, k.ty, k.he, k.ev, k.stored,"
    "  left(k.body, -1) || CASE WHEN k.cn > 0 THEN ',\"cursor\":\"' ||"
    "  ((SELECT seq - $1::bigint FROM tally_log_head WHERE id = 1) + k.cn) || '\"' ELSE '' END ||"
    "  format($5, VARIADIC kv.v) AS body"
    "  FROM unnest($6::int8[], $7::text[], $8::text[], $9::int8[], $10::text[], $11::int4[], $12::int4[],"
    "  $13::bool[], $14::int8[], $15::text[], $16::int8[], $17::bool[])"
    "  WITH ORDINALITY AS k(j, u, key, exp, fp, st, ty, he, ev, body, cn, stored, i)"
    "  JOIN (SELECT k.i, array_agg((b.v[d.o] + d.d)::text ORDER BY d.o) AS v"
    "   FROM unnest($6::int8[]) WITH ORDINALITY AS k(j, i) JOIN b ON b.j = k.j JOIN d ON d.i = k.i GROUP BY k.i) kv"
    "  ON kv.i = k.i),"
    /* a plain insert, as flush_idem's: a record another batch inserted meanwhile fails the batch,
     * which runs again and finds it */
    " ins AS (INSERT INTO tally_idem SELECT u, key, exp, fp, st, ty, he, ev, body FROM k WHERE NOT stored),"
    " rep AS (INSERT INTO tally_idem SELECT u, key, exp, fp, st, ty, he, ev, body FROM k WHERE stored"
    "  ON CONFLICT (\"user\", key) DO UPDATE SET" IDEM_REPLACE_SET ")"
    " SELECT j, array_to_string(v, ',') FROM b";

/* A batch without such records needs no arithmetic of the server: its counts records and its unfolded
 * entries of the asks' items ($2), as of the same snapshot and bounds as PG_ASKS_SQL's, summed in C
 * by transition_deltas_add itself (asks_sum_rows). */
const char PG_ASKS_ROWS_SQL[] =
    "SELECT false, item, kind, n, 0 FROM tally_counts WHERE item = ANY($2::text[])"
    " UNION ALL SELECT true, item, from_kind, to_kind, version FROM tally_log"
    " WHERE seq > coalesce((SELECT checkpoint FROM tally_pipeline WHERE id = 1), 0)"
    " AND seq <= (SELECT seq - $1::bigint FROM tally_log_head WHERE id = 1) AND item = ANY($2::text[])";

/* The splice's numbers: the kinds in order, then the reactors (many mode); returns how many. */
static int asks_slots(const kinds_t *kinds, int slots[KINDS_MAX + 1])
{
    int m = 0;
    for (int c = 1; c <= kinds->count; c++)
        slots[m++] = c;
    if (kinds->mode == REACTION_MODE_MANY)
        slots[m++] = KIND_NONE;
    return m;
}

static int flush_asks(pg_write_t *w)
{
    if (!w->nasks)
        return STORE_OK;
    const pg_store_t *s = w->store;
    const kinds_t *kinds = &s->kinds;
    int slots[KINDS_MAX + 1], m = asks_slots(kinds, slots);
    enum { COUNT, ITEMS, CODES, DELTAS, FMT, J, U, K, EXP, FP, ST, TY, HE, EV, BODY, CN, STORED, NCOL };
    pg_buf_t col[NCOL] = {0};
    for (int c = ITEMS; c < NCOL; c++)
        if (c != FMT)
            pg_buf_open(&col[c]);
    int rc = STORE_OK;
    size_t records = 0;
    itemmap_clear(&w->ask_items);
    for (size_t i = 0; i < w->nasks && rc == STORE_OK; i++) {
        size_t before = w->ask_items.count;
        if (!itemmap_get(&w->ask_items, w->asks[i].item))
            rc = STORE_ERROR;
        else if (w->ask_items.count > before)
            pg_buf_text_elem(&col[ITEMS], w->asks[i].item.ptr, w->asks[i].item.len);
    }
    for (int j = 0; j < m; j++)
        pg_buf_int_elem(&col[CODES], slots[j] == KIND_NONE ? -1 : s->cfg_to_db[slots[j]]);
    for (size_t i = 0; i < w->idem.count && rc == STORE_OK; i++) {
        const pg_entry_t *e = &w->idem.entries[i];
        if (!idem_by_asks(w, e))
            continue;
        const store_counts_ask_t *a = &w->asks[e->rec.counts_ask - 1];
        const itemmap_entry_t *it = itemmap_find(&w->ask_items, a->item);
        if (!it) {
            rc = STORE_ERROR;
            break;
        }
        char fp[2 * FINGERPRINT_LEN + 1];
        fingerprint_hex(e->rec.fingerprint, fp);
        pg_buf_int_elem(&col[J], (long long)(it - w->ask_items.entries) + 1);
        pg_buf_text_elem(&col[U], e->a, e->alen);
        pg_buf_text_elem(&col[K], e->b, e->blen);
        pg_buf_int_elem(&col[EXP], (long long)e->rec.expires_ms);
        pg_buf_text_elem(&col[FP], fp, 2 * FINGERPRINT_LEN);
        pg_buf_int_elem(&col[ST], e->rec.status);
        pg_buf_int_elem(&col[TY], e->rec.type);
        pg_buf_text_elem(&col[HE], e->rec.has_etag ? "t" : "f", 1);
        pg_buf_int_elem(&col[EV], (long long)e->rec.etag_version);
        pg_buf_text_elem(&col[BODY], e->rec.body.ptr, e->rec.body.len);
        pg_buf_int_elem(&col[CN], e->rec.cursor_ordinal);
        pg_buf_text_elem(&col[STORED], e->stored ? "t" : "f", 1);
        records++;
        for (int j = 0; j < m; j++)
            pg_buf_int_elem(&col[DELTAS], (long long)a->deltas[slots[j]]);
    }
    for (int c = ITEMS; c < NCOL; c++) {
        if (c == FMT)
            continue;
        pg_buf_close(&col[c]);
        if (col[c].failed)
            rc = STORE_ERROR;
    }
    char count[PG_NUM_LEN], fmt[1024];
    snprintf(count, sizeof count, "%zu", w->log_count);
    if (!answer_counts_format(kinds, fmt, sizeof fmt))
        rc = STORE_ERROR;
    const char *p[NCOL];
    for (int c = ITEMS; c < NCOL; c++)
        p[c] = col[c].buf;
    p[COUNT] = count;
    p[FMT] = fmt;
    w->asks_rows = records == 0;
    if (rc == STORE_OK) /* prepared on the session's connection (pg_counts_at_commit): planned once */
        rc = w->asks_rows ? pg_pipe_send_prepared(w->store, w->sess->conn, PG_ASKS_ROWS_STMT, 2, p)
                          : pg_pipe_send_prepared(w->store, w->sess->conn, PG_ASKS_STMT, NCOL, p);
    w->piped_count += rc == STORE_OK;
    if (rc == STORE_OK)
        w->asks_result = w->piped_count;
    for (int c = ITEMS; c < NCOL; c++)
        if (c != FMT)
            pg_buf_free(&col[c]);
    return rc;
}

/* PG_ASKS_ROWS_STMT's result summed into each item's counts before the batch (read[j]: item j's
 * counts are known; every item is, unless a row cannot be read). As pg_counts and pg_log_rows read. */
static void asks_sum_rows(pg_write_t *w, const PGresult *res, bool *read)
{
    const pg_store_t *s = w->store;
    for (size_t j = 0; j < w->ask_items.count; j++)
        read[j] = true; /* an item without rows counts none */
    for (int r = 0; r < PQntuples(res); r++) {
        span_t item = {PQgetvalue(res, r, 1), (size_t)PQgetlength(res, r, 1)};
        itemmap_entry_t *e = itemmap_find(&w->ask_items, item);
        if (!e)
            continue;
        long a = strtol(PQgetvalue(res, r, 2), NULL, 10);
        if (PQgetvalue(res, r, 0)[0] != 't') { /* a counts record: kind a, n */
            int64_t n = strtoll(PQgetvalue(res, r, 3), NULL, 10);
            if (a == 0)
                e->deltas[KIND_NONE] = n;
            else if (a > 0 && a <= s->db_kinds && s->db_to_cfg[a] >= 1)
                e->deltas[s->db_to_cfg[a]] = n;
            continue;
        }
        transition_t t = {
            .item = item, .from = pg_cfg_set(s, a), .to = pg_cfg_set(s, strtol(PQgetvalue(res, r, 3), NULL, 10))};
        if (transition_version_unpack(&t, strtoull(PQgetvalue(res, r, 4), NULL, 10)))
            transition_deltas_add(&t, e->deltas);
        else
            read[e - w->ask_items.entries] = false;
    }
}

/* The asks' counts from their statement's result: each item's counts before the batch, plus each
 * answer's own deltas (after the commit: nothing here may fail the batch; an ask left unfilled is the
 * writer's to report). */
static void asks_read(pg_write_t *w, const PGresult *res)
{
    int slots[KINDS_MAX + 1], m = asks_slots(&w->store->kinds, slots);
    size_t n = w->ask_items.count;
    bool *read = calloc(n ? n : 1, sizeof *read);
    if (!read)
        return;
    if (w->asks_rows)
        asks_sum_rows(w, res, read);
    for (int r = 0; !w->asks_rows && r < PQntuples(res); r++) {
        unsigned long long j = strtoull(PQgetvalue(res, r, 0), NULL, 10);
        if (j < 1 || j > n)
            continue;
        itemmap_entry_t *e = &w->ask_items.entries[j - 1];
        const char *v = PQgetvalue(res, r, 1);
        char *end;
        bool ok = true;
        for (int c = 0; ok && c < m; c++) {
            e->deltas[slots[c]] = strtoll(v, &end, 10);
            ok = end != v && (*end == ',' || *end == '\0');
            v = *end ? end + 1 : end;
        }
        read[j - 1] = ok;
    }
    for (size_t i = 0; i < w->nasks; i++) {
        store_counts_ask_t *a = &w->asks[i];
        const itemmap_entry_t *e = itemmap_find(&w->ask_items, a->item);
        if (!e || !read[e - w->ask_items.entries])
            continue;
        for (int c = 0; c < m; c++)
            a->out[slots[c]] = e->deltas[slots[c]] + a->deltas[slots[c]];
        a->filled = true;
    }
    free(read);
}

int pg_write_commit(store_write_t *w_)
{
    uint64_t base;
    return pg_write_commit_at(w_, &base);
}

int pg_write_commit_at(store_write_t *w_, uint64_t *log_base)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    pg_store_t *s = w->store;
    *log_base = 0;
    w->log_result = 0;
    w->asks_result = 0;
    PQclear(w->fold_log); /* read for a fold that did not use it */
    w->fold_log = NULL;
    bool dirty = w->log_count || w->checkpoint_dirty || w->counts.count || w->lists.count;
    for (size_t i = 0; !dirty && i < w->rows.count; i++)
        dirty = w->rows.entries[i].dirty;
    for (size_t i = 0; !dirty && i < w->idem.count; i++)
        dirty = w->idem.entries[i].dirty;
    for (size_t i = 0; !dirty && i < w->claims.count; i++)
        dirty = w->claims.entries[i].dirty;
    if (!dirty && !w->began) { /* nothing was read or written */
        w->active = false;
        return STORE_OK;
    }
    /* Every write of the batch and the COMMIT in one round trip; the results are read in order. */
    int rc = pg_pipe_enter(s, w->sess->conn);
    if (rc != STORE_OK) {
        pg_write_abort(w_);
        return rc;
    }
    w->piped = true;
    w->piped_count = 0;
    rc = flush_rows(w);
    if (rc == STORE_OK)
        rc = flush_idem(w);
    if (rc == STORE_OK && w->claims.count)
        rc = pg_claims_flush(w);
    if (rc == STORE_OK)
        rc = flush_counts(w);
    if (rc == STORE_OK)
        rc = pg_lists_flush(w);
    if (rc == STORE_OK && w->checkpoint_dirty) {
        char cp[PG_NUM_LEN];
        snprintf(cp, sizeof cp, "%" PRIu64, w->checkpoint);
        const char *p[] = {cp};
        rc = pg_wrun(w, "checkpoint", "UPDATE tally_pipeline SET checkpoint = $1 WHERE id = 1", 1, p);
    }
    if (rc == STORE_OK)
        rc = flush_log(w);
    if (rc == STORE_OK)
        rc = flush_asks(w);
    /* A fold's commit does not wait for the WAL (pg_fold_begin), but a record it puts may be acted on
     * by another database (the checkpoints of a user's list, which let another shard prune its log):
     * such a commit waits, as a writer's does. */
    bool durable = !w->sess->async_commit || w->aux_dirty;
    if (rc == STORE_OK && w->sess->async_commit && w->aux_dirty)
        rc = pg_wrun(w, "durable", "SET LOCAL synchronous_commit TO on", 0, NULL);
    w->piped = false;
    uint64_t started = mono_ns();
    bool committing = rc == STORE_OK;
    if (committing)
        rc = pg_pipe_send(s, w->sess->conn, "COMMIT", 0, NULL);
    size_t expect = w->piped_count + (rc == STORE_OK);
    int sent = rc;
    if (w->piped_count || committing)
        rc = pg_pipe_sync(s, w->sess->conn);
    uint64_t base = 0;
    /* The COMMIT's own result came back OK after every write's did. Decided from the results alone:
     * a flush that gave up waiting (the server not reading while a statement waits on a lock) does
     * not undo a COMMIT whose result then arrives OK. */
    bool committed = false;
    int results = STORE_OK;
    for (size_t i = 0; i < expect && PQstatus(w->sess->conn) == CONNECTION_OK; i++) {
        int one;
        bool is_commit = i + 1 == expect && sent == STORE_OK;
        PGresult *res = pg_pipe_result(s, w->sess->conn, is_commit ? "commit" : "write", &one);
        if (one == STORE_OK && i + 1 == w->log_result && res && PQntuples(res) == 1)
            base = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        if (one == STORE_OK && i + 1 == w->asks_result && res)
            asks_read(w, res);
        PQclear(res);
        if (results == STORE_OK && one != STORE_OK)
            results = one; /* the first failure: the rest were aborted by it */
        committed = is_commit && results == STORE_OK;
    }
    if (committed)
        rc = STORE_OK;
    else if (rc == STORE_OK)
        rc = results;
    int left = pg_pipe_leave(s, w->sess->conn);
    if (committed && left != STORE_OK) {
        /* The commit is durable: what failed after it must not answer the batch as failed. The
         * connection is left in an unknown state: dropped, the next batch connects again. */
        log_line("level=warn event=pipeline-end-failed error=\"after a durable commit; reconnecting\"");
        pg_session_drop(w->sess);
        left = STORE_OK;
    }
    if (rc == STORE_OK)
        rc = left;
    if (rc == STORE_OK && sent == STORE_OK) {
        if (durable) /* the durable syncs: the fold's commits do not wait for one */
            histogram_observe(&s->commit_seconds, (double)(mono_ns() - started) / 1e9);
        atomic_fetch_add_explicit(&s->transactions, 1, memory_order_relaxed);
        pg_mark_up(s);
        w->active = w->began = false;
        *log_base = base;
        return STORE_OK;
    }
    if (rc == STORE_OK)
        rc = sent;
    /* A lost connection leaves the outcome of a sent COMMIT unknown: STORE_UNAVAILABLE says so. */
    if (PQstatus(w->sess->conn) == CONNECTION_OK && PQtransactionStatus(w->sess->conn) != PQTRANS_IDLE)
        PQclear(PQexec(w->sess->conn, "ROLLBACK"));
    w->active = w->began = false;
    return rc;
}

/* A store shared by nodes folds on a connection of its own (pg_fold_begin). */
bool pg_folds_apart(const store_t *s_)
{
    (void)s_;
    return true;
}

/* Every commit is seen by readers at once: nothing to defer, nothing pending. */
void pg_write_defer(store_write_t *w_, bool (*more)(void *arg), void *arg)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    (void)w_, (void)more, (void)arg;
}

bool pg_pending(const store_t *s_)
{
    (void)s_;
    return false;
}

int pg_flush(store_t *s_)
{
    assert(!((pg_store_t *)s_)->write.active);
    return STORE_OK;
}
