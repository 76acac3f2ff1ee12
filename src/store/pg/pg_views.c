/* pg_views.c — the PostgreSQL store's reads, and only reads: snapshots (a repeatable-read transaction
 * on a pooled connection, or one statement), the counts and rows, a feed page, the log, the
 * checkpoint, recount's truth, walks of the items and rows, statistics, auxiliary records. */
#include "store/pg/pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATS_EXACT_MAX "100000"
/* The number of rows of table (count(what)), exact while the table is small. */
#define PG_COUNT(table, what)                                                                                          \
    "(SELECT CASE WHEN reltuples >= " STATS_EXACT_MAX " THEN reltuples::bigint ELSE (SELECT count(" what               \
    ") FROM " table ") END FROM pg_class WHERE oid = '" table "'::regclass)"

/* --- snapshots: a repeatable-read transaction on a pooled connection, begun at the first read --- */

int pg_read_begin(store_t *s_, store_read_t **out)
{
    pg_store_t *s = (pg_store_t *)s_;
    pg_read_t *r = calloc(1, sizeof *r);
    if (!r)
        return STORE_ERROR;
    r->base.ops = &pg_store_ops;
    r->store = s;
    if (!(r->conn = pg_pool_take(s, &r->epoch))) {
        free(r);
        return STORE_UNAVAILABLE;
    }
    *out = &r->base;
    return STORE_OK;
}

int pg_read_begin_single(store_t *s_, store_read_t **out)
{
    int rc = pg_read_begin(s_, out);
    if (rc == STORE_OK)
        ((pg_read_t *)*out)->single = true;
    return rc;
}

void pg_read_end(store_read_t *r_)
{
    pg_read_t *r = (pg_read_t *)r_;
    /* The COMMIT's answer is read by the connection's next user (pg_pool_take): a read-only
     * snapshot has nothing to wait for, and a reader answers its client sooner. */
    if (r->began && !PQsendQuery(r->conn, "COMMIT")) {
        PQfinish(r->conn);
        r->conn = NULL;
    }
    pg_pool_give(r->store, r->conn, r->epoch);
    free(r);
}

/* One counts row into counts: a kind's, or (disk code 0) the reactors', kept in many mode only. */
static void counts_row(const pg_store_t *s, long db, int64_t n, int64_t counts[KINDS_MAX + 1])
{
    if (db == 0 && s->kinds.mode == REACTION_MODE_MANY)
        counts[KIND_NONE] = n;
    else if (db > 0 && db <= s->db_kinds) {
        counts[s->db_to_cfg[db]] = n;
        if (s->kinds.mode == REACTION_MODE_ONE) /* one kind per user: the reactors are the sum */
            counts[KIND_NONE] += n;
    }
}

static void counts_fill(const pg_store_t *s, const PGresult *res, int kind_col, int n_col,
                        int64_t counts[KINDS_MAX + 1])
{
    for (int i = 0; i < PQntuples(res); i++)
        counts_row(s, strtol(PQgetvalue(res, i, kind_col), NULL, 10), strtoll(PQgetvalue(res, i, n_col), NULL, 10),
                   counts);
}

int pg_read_counts(store_read_t *r_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    pg_read_t *r = (pg_read_t *)r_;
    char ibuf[ID_MAX_LEN + 1];
    snprintf(ibuf, sizeof ibuf, "%.*s", (int)item.len, item.ptr);
    const char *p[] = {ibuf};
    int rc;
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    PGresult *res = pg_rexec(r, "read-counts", "SELECT kind, n FROM tally_counts WHERE item = $1", 1, p, &rc);
    if (!res)
        return rc;
    counts_fill(r->store, res, 0, 1, counts);
    PQclear(res);
    return STORE_OK;
}

int pg_read_row(store_read_t *r_, span_t item, span_t user, reaction_row_t *row)
{
    pg_read_t *r = (pg_read_t *)r_;
    char ibuf[ID_MAX_LEN + 1], ubuf[ID_MAX_LEN + 1];
    snprintf(ibuf, sizeof ibuf, "%.*s", (int)item.len, item.ptr);
    snprintf(ubuf, sizeof ubuf, "%.*s", (int)user.len, user.ptr);
    const char *p[] = {ibuf, ubuf};
    int rc;
    *row = (reaction_row_t){KINDSET_EMPTY, 0};
    PGresult *res =
        pg_rexec(r, "read-row", "SELECT kind, version FROM tally_rows WHERE item = $1 AND \"user\" = $2", 2, p, &rc);
    if (!res)
        return rc;
    if (PQntuples(res) == 1) {
        row->set = pg_cfg_set(r->store, strtol(PQgetvalue(res, 0, 0), NULL, 10));
        row->version = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
    }
    PQclear(res);
    return STORE_OK;
}

/* A feed page in one round trip: the snapshot's BEGIN (when this is its first read) and the
 * prepared statement, pipelined. */
int pg_read_many(store_read_t *r_, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                 reaction_row_t *rows)
{
    pg_read_t *r = (pg_read_t *)r_;
    pg_store_t *s = r->store;
    pg_buf_t list = {0};
    char who[ID_MAX_LEN + 1];
    snprintf(who, sizeof who, "%.*s", (int)(user.len < ID_MAX_LEN ? user.len : ID_MAX_LEN), user.ptr);
    for (size_t i = 0; i < n; i++) {
        memset(counts[i], 0, sizeof counts[i]);
        if (user.len)
            rows[i] = (reaction_row_t){KINDSET_EMPTY, 0};
    }
    if (pg_buf_items(&list, items, n) != STORE_OK)
        return STORE_ERROR;
    const char *p[] = {list.buf, who};
    int rc;
    PGresult *res =
        pg_rexec_prepared(r, "read-many", user.len ? PG_READ_PAGE_USER : PG_READ_PAGE, user.len ? 2 : 1, p, &rc);
    pg_buf_free(&list);
    for (int t = 0; res && t < PQntuples(res); t++) {
        span_t item = {PQgetvalue(res, t, 1), (size_t)PQgetlength(res, t, 1)};
        long db = strtol(PQgetvalue(res, t, 2), NULL, 10);
        long long v = strtoll(PQgetvalue(res, t, 3), NULL, 10);
        for (size_t i = 0; i < n; i++) { /* an id may be asked twice */
            if (!span_eq(items[i], item))
                continue;
            if (PQgetvalue(res, t, 0)[0] == '0')
                counts_row(s, db, v, counts[i]);
            else if (PQgetvalue(res, t, 0)[0] == '1')
                rows[i] = (reaction_row_t){pg_cfg_set(s, db), (uint64_t)v};
        }
    }
    PQclear(res);
    return rc;
}

/* --- the log, the checkpoint, recount's truth, walks, statistics, auxiliary records --- */

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
    char a[PG_NUM_LEN], l[PG_NUM_LEN], h[PG_NUM_LEN];
    pg_num(a, after);
    pg_num(l, limit);
    pg_num(h, pg_log_range_end(after, limit));
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

int pg_read_tally_items(store_read_t *r_, const span_t *items, size_t n, int64_t (*counts)[KINDS_MAX + 1])
{
    pg_read_t *r = (pg_read_t *)r_;
    pg_buf_t list = {0};
    for (size_t i = 0; i < n; i++)
        memset(counts[i], 0, sizeof counts[i]);
    if (pg_buf_items(&list, items, n) != STORE_OK)
        return STORE_ERROR;
    const char *p[] = {list.buf};
    int rc;
    PGresult *res = pg_rexec(r, "tally-items",
                             "SELECT item, kind, count(*) FROM tally_rows r WHERE item = ANY($1::text[]) AND kind <> 0"
                             " AND NOT EXISTS (SELECT 1 FROM tally_aux a WHERE a.key = '" STORE_VOID_PREFIX
                             "' || r.\"user\") GROUP BY item, kind",
                             1, p, &rc);
    pg_buf_free(&list);
    for (int t = 0; res && t < PQntuples(res); t++) { /* one row per item and stored set */
        span_t item = {PQgetvalue(res, t, 0), (size_t)PQgetlength(res, t, 0)};
        kindset_t set = pg_cfg_set(r->store, strtol(PQgetvalue(res, t, 1), NULL, 10));
        int64_t count = strtoll(PQgetvalue(res, t, 2), NULL, 10);
        for (size_t i = 0; i < n; i++) { /* an id may be asked twice */
            if (!span_eq(items[i], item))
                continue;
            for (kindset_t k = set; k; k &= k - 1)
                counts[i][__builtin_ctz(k)] += count;
            counts[i][KIND_NONE] += set ? count : 0; /* the reactors */
        }
    }
    PQclear(res);
    return rc;
}

/* Each table's range after `after` is cut to limit items before the two are merged: an index scan of
 * a chunk's rows, where one UNION of both whole ranges read every item after `after` for each chunk of
 * a whole-store walk (110 ms a chunk of 256 on a store of 41k items, quadratic in the store's size). */
int pg_read_items(store_read_t *r_, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited)
{
    pg_read_t *r = (pg_read_t *)r_;
    char a[ID_MAX_LEN + 1], l[PG_NUM_LEN];
    pg_cstr(a, after);
    pg_num(l, limit);
    const char *p[] = {a, l};
    int rc;
    *visited = 0;
    PGresult *res = pg_rexec(r, "read-items",
                             "SELECT item FROM ((SELECT DISTINCT item FROM tally_rows WHERE item > $1 ORDER BY item"
                             " LIMIT $2) UNION (SELECT DISTINCT item FROM tally_counts WHERE item > $1 ORDER BY item"
                             " LIMIT $2)) i ORDER BY item LIMIT $2",
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
    char a[PG_NUM_LEN];
    pg_num(a, at_ms);
    const char *p[] = {a};
    /* Nodes' clocks differ a little: the first entry at or after at_ms in log order is close enough
     * for what uses it (where trending starts replaying). */
    return read_numbers((pg_read_t *)r_, "log-seek",
                        "SELECT coalesce((SELECT seq FROM tally_log WHERE at_ms >= $1 ORDER BY seq LIMIT 1),"
                        " (SELECT coalesce(max(seq), 0) + 1 FROM tally_log))",
                        1, p, seq, 1);
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
    return pg_aux_rows(r->store, r->conn, "read-aux", p, fn, arg);
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

/* Its snapshots show every answered write: no cursor past them to remember. */
uint64_t pg_read_acknowledged(store_read_t *r_)
{
    (void)r_;
    return 0;
}
