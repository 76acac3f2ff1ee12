/* pg_views.c — the PostgreSQL store's views (the log, recount's truth, walks, statistics,
 * auxiliary records) and the writer's walks and prunes. */
#include "store/pg/pg_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUM_LEN 24
#define STATS_EXACT_MAX "100000"
/* The number of rows of table (count(what)), exact while the table is small. */
#define PG_COUNT(table, what)                                                                                          \
    "(SELECT CASE WHEN reltuples >= " STATS_EXACT_MAX " THEN reltuples::bigint ELSE (SELECT count(" what               \
    ") FROM " table ") END FROM pg_class WHERE oid = '" table "'::regclass)"

static void num(char out[NUM_LEN], uint64_t v)
{
    snprintf(out, NUM_LEN, "%" PRIu64, v > INT64_MAX ? (uint64_t)INT64_MAX : v); /* "no limit" fits a bigint */
}

static void cstr(char out[ID_MAX_LEN + 1], span_t s)
{
    snprintf(out, ID_MAX_LEN + 1, "%.*s", (int)(s.len > ID_MAX_LEN ? ID_MAX_LEN : s.len), s.ptr);
}

/* The first row of a query of ncols numbers, in r's snapshot (zeros when there is no row). */
static int read_numbers(pg_read_t *r, const char *what, const char *sql, int n, const char *const *params,
                        uint64_t *out, int ncols)
{
    int rc;
    PGresult *res = pg_rexec(r, what, sql, n, params, &rc);
    if (!res)
        return rc;
    for (int c = 0; c < ncols; c++)
        out[c] = PQntuples(res) >= 1 && c < PQnfields(res) ? strtoull(PQgetvalue(res, 0, c), NULL, 10) : 0;
    PQclear(res);
    return STORE_OK;
}

int pg_read_checkpoint(store_read_t *r_, uint64_t *seq)
{
    return read_numbers((pg_read_t *)r_, "read-checkpoint", "SELECT checkpoint FROM tally_pipeline WHERE id = 1", 0,
                        NULL, seq, 1);
}

int pg_read_log(store_read_t *r_, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    pg_read_t *r = (pg_read_t *)r_;
    char a[NUM_LEN], l[NUM_LEN], h[NUM_LEN];
    num(a, after);
    num(l, limit);
    num(h, pg_log_range_end(after, limit));
    const char *p[] = {a, l, h};
    int rc;
    PGresult *res = pg_rexec(r, "read-log", PG_LOG_RANGE_SQL, 3, p, &rc);
    if (!res)
        return rc;
    rc = pg_log_rows(r->store, res, fn, arg);
    PQclear(res);
    return rc;
}

int pg_read_log_bounds(store_read_t *r_, uint64_t *first, uint64_t *last)
{
    uint64_t bounds[2] = {0, 0};
    int rc = read_numbers((pg_read_t *)r_, "log-bounds",
                          "SELECT coalesce((SELECT min(seq) FROM tally_log), 0),"
                          " coalesce((SELECT max(seq) FROM tally_log), 0)",
                          0, NULL, bounds, 2);
    *first = bounds[0];
    *last = bounds[1];
    return rc;
}

int pg_read_tally_item(store_read_t *r_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    pg_read_t *r = (pg_read_t *)r_;
    char ibuf[ID_MAX_LEN + 1];
    cstr(ibuf, item);
    const char *p[] = {ibuf};
    int rc;
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    PGresult *res =
        pg_rexec(r, "tally-item",
                 "SELECT kind, count(*) FROM tally_rows r WHERE item = $1 AND kind <> 0 AND NOT EXISTS"
                 " (SELECT 1 FROM tally_aux a WHERE a.key = '" STORE_VOID_PREFIX "' || r.\"user\") GROUP BY kind",
                 1, p, &rc);
    if (!res)
        return rc;
    for (int i = 0; i < PQntuples(res); i++) { /* one row per stored set */
        kindset_t set = pg_cfg_set(r->store, strtol(PQgetvalue(res, i, 0), NULL, 10));
        int64_t n = strtoll(PQgetvalue(res, i, 1), NULL, 10);
        for (kindset_t k = set; k; k &= k - 1)
            counts[__builtin_ctz(k)] += n;
        counts[KIND_NONE] += set ? n : 0; /* the reactors */
    }
    PQclear(res);
    return STORE_OK;
}

int pg_read_items(store_read_t *r_, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited)
{
    pg_read_t *r = (pg_read_t *)r_;
    char a[ID_MAX_LEN + 1], l[NUM_LEN];
    cstr(a, after);
    num(l, limit);
    const char *p[] = {a, l};
    int rc;
    *visited = 0;
    PGresult *res = pg_rexec(r, "read-items",
                             "SELECT item FROM (SELECT item FROM tally_rows WHERE item > $1 UNION SELECT item FROM "
                             "tally_counts WHERE item > $1) i ORDER BY item LIMIT $2",
                             2, p, &rc);
    if (!res)
        return rc;
    for (int i = 0; i < PQntuples(res); i++) {
        (*visited)++;
        if (fn(arg, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)}) != 0)
            break;
    }
    PQclear(res);
    return STORE_OK;
}

int pg_read_rows(store_read_t *r_, store_row_fn fn, void *arg)
{
    pg_read_t *r = (pg_read_t *)r_;
    char item[ID_MAX_LEN + 1] = "", user[ID_MAX_LEN + 1] = "";
    int rc = STORE_OK;
    for (;;) { /* pages in key order, within the snapshot */
        const char *p[] = {item, user};
        PGresult *res =
            pg_rexec(r, "read-rows",
                     "SELECT item, \"user\", kind, version FROM tally_rows WHERE (item, \"user\") > ($1, $2)"
                     " AND version > 0 ORDER BY item, \"user\" LIMIT 1000",
                     2, p, &rc);
        if (!res)
            return rc;
        int n = PQntuples(res), stop = 0;
        for (int i = 0; i < n && !stop; i++) {
            reaction_row_t row = {pg_cfg_set(r->store, strtol(PQgetvalue(res, i, 2), NULL, 10)),
                                  strtoull(PQgetvalue(res, i, 3), NULL, 10)};
            stop = fn(arg, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)},
                      (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)}, &row);
        }
        if (n) {
            snprintf(item, sizeof item, "%s", PQgetvalue(res, n - 1, 0));
            snprintf(user, sizeof user, "%s", PQgetvalue(res, n - 1, 1));
        }
        PQclear(res);
        if (stop || n < 1000)
            return STORE_OK;
    }
}

int pg_read_log_seek(store_read_t *r_, uint64_t at_ms, uint64_t *seq)
{
    char a[NUM_LEN];
    num(a, at_ms);
    const char *p[] = {a};
    /* Nodes' clocks differ a little: the first entry at or after at_ms in log order is close enough
     * for what uses it (where trending starts replaying). */
    return read_numbers((pg_read_t *)r_, "log-seek",
                        "SELECT coalesce((SELECT seq FROM tally_log WHERE at_ms >= $1 ORDER BY seq LIMIT 1),"
                        " (SELECT coalesce(max(seq), 0) + 1 FROM tally_log))",
                        1, p, seq, 1);
}

/* The auxiliary records whose key starts with p[0], in key order, to fn (binary results: the values
 * are bytes); on conn, in whatever transaction it is in. */
static int aux_rows(pg_store_t *s, PGconn *conn, const char *what, const char *const p[1], store_aux_fn fn, void *arg)
{
    pg_count_round_trip(s, conn);
    PGresult *res = PQexecParams(conn, "SELECT key, value FROM tally_aux WHERE starts_with(key, $1) ORDER BY key", 1,
                                 NULL, p, NULL, NULL, 1);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = pg_result_rc(s, conn, res, what);
        PQclear(res);
        return rc;
    }
    for (int i = 0; i < PQntuples(res); i++)
        if (fn(arg, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)},
               (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)}) != 0)
            break;
    PQclear(res);
    return STORE_OK;
}

int pg_read_aux(store_read_t *r_, span_t prefix, store_aux_fn fn, void *arg)
{
    pg_read_t *r = (pg_read_t *)r_;
    char pre[512];
    snprintf(pre, sizeof pre, "%.*s", (int)(prefix.len < 511 ? prefix.len : 511), prefix.ptr);
    const char *p[] = {pre};
    int rc;
    /* binary results: the values are bytes */
    if (!r->began) {
        if ((rc = pg_run(r->store, r->conn, "read-aux", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL)) !=
            STORE_OK)
            return rc;
        r->began = true;
    }
    return aux_rows(r->store, r->conn, "read-aux", p, fn, arg);
}

int pg_stats(store_t *s_, store_stats_t *st)
{
    pg_store_t *s = (pg_store_t *)s_;
    uint64_t epoch;
    PGconn *conn = pg_pool_take(s, &epoch);
    if (!conn) {
        *st = (store_stats_t){.shared = true, .commit_seconds = &s->commit_seconds};
        return STORE_UNAVAILABLE;
    }
    int rc;
    /* Exact below STATS_EXACT_MAX rows, past it the planner's estimate: an exact count(*) of a
     * large table reads all of it, on every scrape. */
    PGresult *res = pg_exec(
        s, conn, "stats",
        "SELECT " PG_COUNT("tally_rows", "*") ", " PG_COUNT(
            "tally_log", "*") ","
                              " pg_total_relation_size('tally_log'), " PG_COUNT(
                                  "tally_idem", "*") ","
                                                     " pg_database_size(current_database()),"
                                                     " (SELECT checkpoint FROM tally_pipeline WHERE id = 1), " PG_COUNT(
                                                         "tally_counts", "DISTINCT item"),
        0, NULL, &rc);
    if (res) {
        *st = (store_stats_t){
            .rows = strtoull(PQgetvalue(res, 0, 0), NULL, 10),
            .log_entries = strtoull(PQgetvalue(res, 0, 1), NULL, 10),
            .log_bytes = strtoull(PQgetvalue(res, 0, 2), NULL, 10),
            .idem_records = strtoull(PQgetvalue(res, 0, 3), NULL, 10),
            .used_bytes = strtoull(PQgetvalue(res, 0, 4), NULL, 10),
            .checkpoint = strtoull(PQgetvalue(res, 0, 5), NULL, 10),
            .items = strtoull(PQgetvalue(res, 0, 6), NULL, 10),
        };
    }
    st->shared = true;
    st->connected = atomic_load(&s->up);
    st->round_trips = atomic_load(&s->round_trips);
    st->transactions = atomic_load(&s->transactions);
    st->writer_round_trips = atomic_load(&s->writer_round_trips);
    st->fold_round_trips = atomic_load(&s->fold_round_trips);
    st->commit_seconds = &s->commit_seconds;
    if (res) {
        PQclear(res);
    }
    pg_pool_give(s, conn, epoch);
    return rc;
}

/* --- the writer's walks (clearing an item or a user) and prunes --- */

/* Rows of one walk, locked and cached for the row reads that follow, then handed to fn. */
static int walk(pg_write_t *w, const char *sql, span_t fixed, span_t after, size_t limit, int name_col,
                store_name_fn fn, void *arg, size_t *visited, char *last, size_t *last_len)
{
    char f[ID_MAX_LEN + 1], a[ID_MAX_LEN + 1], l[NUM_LEN];
    cstr(f, fixed);
    cstr(a, after);
    num(l, limit);
    const char *p[] = {f, a, l};
    int rc;
    *visited = 0;
    PGresult *res = pg_wexec(w, "walk", sql, 3, p, &rc);
    if (!res)
        return rc;
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) { /* columns: item, user, kind, version */
        span_t item = {PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)};
        span_t user = {PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)};
        pg_entry_t *e = pg_cache_find(&w->rows, item, user);
        if (!e && (e = pg_cache_put(&w->rows, item, user))) {
            e->row.set = pg_cfg_set(w->store, strtol(PQgetvalue(res, i, 2), NULL, 10));
            e->row.version = strtoull(PQgetvalue(res, i, 3), NULL, 10);
            e->present = e->stored = true;
        }
    }
    for (int i = 0; i < n; i++) {
        (*visited)++;
        span_t name = {PQgetvalue(res, i, name_col), (size_t)PQgetlength(res, i, name_col)};
        if (last) {
            memcpy(last, name.ptr, name.len);
            *last_len = name.len;
        }
        if (fn(arg, name) != 0)
            break;
    }
    PQclear(res);
    return STORE_OK;
}

int pg_item_users(store_write_t *w_, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg,
                  size_t *visited)
{
    return walk((pg_write_t *)w_,
                "SELECT item, \"user\", kind, version FROM tally_rows WHERE item = $1 AND \"user\" > $2 AND kind <> 0"
                " ORDER BY \"user\" LIMIT $3 FOR UPDATE",
                item, after, limit, 1, fn, arg, visited, NULL, NULL);
}

int pg_user_items(store_write_t *w_, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                  size_t *visited, char last[ID_MAX_LEN], size_t *last_len)
{
    *last_len = 0;
    return walk((pg_write_t *)w_,
                "SELECT item, \"user\", kind, version FROM tally_rows WHERE \"user\" = $1 AND item > $2 AND kind <> 0"
                " ORDER BY item LIMIT $3 FOR UPDATE",
                user, after, limit, 0, fn, arg, visited, last, last_len);
}

static int count_deleted(pg_write_t *w, const char *what, const char *sql, int n, const char *const *p, size_t *deleted)
{
    int rc;
    *deleted = 0;
    PGresult *res = pg_wexec(w, what, sql, n, p, &rc);
    if (!res)
        return rc;
    *deleted = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return STORE_OK;
}

int pg_idem_delete_user(store_write_t *w_, span_t user, size_t limit, size_t *deleted)
{
    char u[ID_MAX_LEN + 1], l[NUM_LEN];
    cstr(u, user);
    num(l, limit);
    const char *p[] = {u, l};
    return count_deleted((pg_write_t *)w_, "delete-user-keys",
                         "WITH d AS (DELETE FROM tally_idem WHERE \"user\" = $1 AND key IN (SELECT key FROM tally_idem"
                         " WHERE \"user\" = $1 ORDER BY key LIMIT $2) RETURNING 1) SELECT count(*) FROM d",
                         2, p, deleted);
}

int pg_log_prune(store_write_t *w_, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted)
{
    char u[NUM_LEN], b[NUM_LEN], l[NUM_LEN];
    num(u, upto_seq);
    num(b, before_ms > INT64_MAX ? INT64_MAX : before_ms);
    num(l, limit);
    const char *p[] = {u, b, l};
    /* the oldest first, stopping at the first one too young (as on the embedded store) */
    return count_deleted((pg_write_t *)w_, "log-prune",
                         "WITH c AS (SELECT seq, at_ms FROM tally_log WHERE seq <= $1 ORDER BY seq LIMIT $3),"
                         " stop AS (SELECT coalesce(min(seq), 9223372036854775807) AS s FROM c WHERE at_ms >= $2),"
                         " d AS (DELETE FROM tally_log WHERE seq IN (SELECT seq FROM c, stop WHERE seq < stop.s)"
                         " RETURNING 1) SELECT count(*) FROM d",
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
    pg_write_t *w = (pg_write_t *)w_;
    char k[512];
    snprintf(k, sizeof k, "%.*s", (int)(key.len < 511 ? key.len : 511), key.ptr);
    const char *p[] = {k, value.ptr};
    int lengths[] = {0, (int)value.len}, formats[] = {0, 1};
    int rc;
    PQclear(pg_wexec(w, "aux", "SELECT 1", 0, NULL, &rc)); /* begins the transaction */
    if (rc != STORE_OK)
        return rc;
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
    pg_write_t *w = (pg_write_t *)w_;
    char pre[512];
    snprintf(pre, sizeof pre, "%.*s", (int)(prefix.len < 511 ? prefix.len : 511), prefix.ptr);
    const char *p[] = {pre};
    int rc = pg_wrun(w, "aux-lock", "SELECT pg_advisory_xact_lock(" PG_LOCK_AUX_SQL ", hashtext($1))", 1, p);
    if (rc != STORE_OK)
        return rc;
    return aux_rows(w->store, w->sess->conn, "aux-read", p, fn, arg);
}

int pg_aux_delete_range(store_write_t *w_, span_t from, span_t to)
{
    note_void_flag((pg_write_t *)w_, from, false); /* a restore deletes the one record */
    char f[512], t[512];
    snprintf(f, sizeof f, "%.*s", (int)(from.len < 511 ? from.len : 511), from.ptr);
    snprintf(t, sizeof t, "%.*s", (int)(to.len < 511 ? to.len : 511), to.ptr);
    const char *p[] = {f, t};
    return pg_wrun((pg_write_t *)w_, "aux-delete", "DELETE FROM tally_aux WHERE key >= $1 AND key < $2", 2, p);
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

/* Its snapshots show every answered write: no cursor past them to remember. */
uint64_t pg_read_acknowledged(store_read_t *r_)
{
    (void)r_;
    return 0;
}
