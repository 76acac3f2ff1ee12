/* pg_lists.c — the PostgreSQL store's lists: who reacted to an item, what a user reacted to.
 *
 * One table holds both indexes, so they cannot disagree with each other:
 *   tally_lists (item, user, kind, seq, at_ms, kinds)  PRIMARY KEY (item, user, kind)
 *     by item: (item, kind, seq, user)   by user: (user, kind, seq, item)
 * kind 0 is the pair's "any kind" entry (at its last change; its kinds column is the pair's set, as
 * tally_rows stores one); kind d > 0 (a disk code) the entry of a kind of the set, at the position
 * where it joined. A page is one range scan of one of the two indexes. Only the fold writes here,
 * and the fold holds the checkpoint's row lock: one writer at a time, in one log order. */
#include "store/pg/pg_internal.h"

#include <stdlib.h>
#include <string.h>

static uint32_t db_bits(const pg_store_t *s, kindset_t set)
{
    uint32_t db = 0;
    for (; set; set &= set - 1)
        db |= 1u << s->cfg_to_db[__builtin_ctz(set)];
    return db;
}

/* --- the fold's changes: gathered per pair, written at commit --- */

int pg_list_apply(store_write_t *w_, span_t item, span_t user, const list_change_t *c)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    listmap_entry_t *e = listmap_get(&w->lists, item, user);
    if (!e)
        return STORE_ERROR;
    list_change_merge(&e->change, c); /* a new entry's initial change merged with c is c */
    return STORE_OK;
}

/* Two statements into the commit's pipeline: every entry of a changed pair whose kind is no longer
 * listed goes; the pair's "any kind" entry and the kinds that joined are put (in key order). Entries
 * at position 0 (pairs of another shard's items, engine/userfold.h) take one position of the log
 * here: the head moves by one under its row lock, held to the commit as a batch's is, so the position
 * is later than every entry committed before and earlier than every one committed after; the log
 * has no entry there (its readers allow gaps). Without such entries the statement is the one-shard
 * one, and the head is not touched. */
int pg_lists_flush(pg_write_t *w)
{
    if (!w->lists.count)
        return STORE_OK;
    const pg_store_t *s = w->store;
    enum { ITEM, USER, KIND, SEQ, AT, SET, NCOL };
    pg_buf_t del[3] = {0}, put[NCOL] = {0};
    bool at_commit = false;
    for (int c = 0; c < 3; c++)
        pg_buf_open(&del[c]);
    for (int c = 0; c < NCOL; c++)
        pg_buf_open(&put[c]);
    for (size_t i = 0; i < w->lists.count; i++) {
        const listmap_entry_t *e = &w->lists.entries[i];
        const list_change_t *c = &e->change;
        uint32_t keep = c->set ? db_bits(s, c->set) | 1u : 0;
        pg_buf_text_elem(&del[ITEM], e->item, e->item_len);
        pg_buf_text_elem(&del[USER], e->user, e->user_len);
        pg_buf_int_elem(&del[2], keep);
        if (!c->set)
            continue;
        long set = pg_db_set(s, c->set);
        at_commit |= c->seq == 0;
        for (int k = KIND_NONE; k <= KINDS_MAX; k++) { /* KIND_NONE: the "any kind" entry */
            bool any = k == KIND_NONE;
            if (!any && !kindset_has(c->joined & c->set, k))
                continue;
            pg_buf_text_elem(&put[ITEM], e->item, e->item_len);
            pg_buf_text_elem(&put[USER], e->user, e->user_len);
            pg_buf_int_elem(&put[KIND], any ? 0 : s->cfg_to_db[k]);
            pg_buf_int_elem(&put[SEQ], (long long)(any ? c->seq : c->kind_seq[k]));
            pg_buf_int_elem(&put[AT], (long long)(any ? c->at_ms : c->kind_at[k]));
            pg_buf_int_elem(&put[SET], set);
        }
    }
    int rc = STORE_OK;
    for (int c = 0; c < 3; c++) {
        pg_buf_close(&del[c]);
        rc = del[c].failed ? STORE_ERROR : rc;
    }
    for (int c = 0; c < NCOL; c++) {
        pg_buf_close(&put[c]);
        rc = put[c].failed ? STORE_ERROR : rc;
    }
    if (rc == STORE_OK) {
        const char *p[] = {del[ITEM].buf, del[USER].buf, del[2].buf};
        rc = pg_wrun(w, "lists-delete",
                     "DELETE FROM tally_lists t USING unnest($1::text[], $2::text[], $3::int8[]) AS c(item, u, keep)"
                     " WHERE t.item = c.item AND t.\"user\" = c.u AND (c.keep >> t.kind) & 1 = 0",
                     3, p);
    }
    if (rc == STORE_OK && at_commit) {
        const char *p[] = {put[ITEM].buf, put[USER].buf, put[KIND].buf, put[SEQ].buf, put[AT].buf, put[SET].buf};
        rc = pg_wrun(w, "lists-put",
                     "WITH h AS (UPDATE tally_log_head SET seq = seq + 1 WHERE id = 1 RETURNING seq)"
                     " INSERT INTO tally_lists SELECT c.item, c.u, c.kind, CASE WHEN c.seq = 0 THEN h.seq ELSE c.seq"
                     " END, c.at, c.kinds FROM unnest($1::text[], $2::text[], $3::int4[], $4::int8[], $5::int8[],"
                     " $6::int4[]) AS c(item, u, kind, seq, at, kinds) CROSS JOIN h ORDER BY c.item COLLATE \"C\","
                     " c.u COLLATE \"C\", c.kind ON CONFLICT (item, \"user\", kind) DO UPDATE SET seq = excluded.seq,"
                     " at_ms = excluded.at_ms, kinds = excluded.kinds",
                     NCOL, p);
    } else if (rc == STORE_OK && strcmp(put[ITEM].buf, "{}") != 0) {
        const char *p[] = {put[ITEM].buf, put[USER].buf, put[KIND].buf, put[SEQ].buf, put[AT].buf, put[SET].buf};
        rc = pg_wrun(w, "lists-put",
                     "INSERT INTO tally_lists SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::int8[],"
                     " $5::int8[], $6::int4[]) AS c(item, u, kind, seq, at, kinds) ORDER BY item COLLATE \"C\","
                     " u COLLATE \"C\", kind ON CONFLICT (item, \"user\", kind) DO UPDATE SET seq = excluded.seq,"
                     " at_ms = excluded.at_ms, kinds = excluded.kinds",
                     NCOL, p);
    }
    for (int c = 0; c < 3; c++)
        pg_buf_free(&del[c]);
    for (int c = 0; c < NCOL; c++)
        pg_buf_free(&put[c]);
    return rc;
}

/* --- building the lists from the rows and the retained log --- */

/* d is in a stored set k (a disk code, or the negated bits of several) */
#define PG_SET_HAS(k, d) "(CASE WHEN " k " >= 0 THEN " k " = " d " ELSE ((-(" k ")::bigint) >> " d ") & 1 = 1 END)"

const char *const PG_LISTS_BUILD_SQL[PG_LISTS_BUILD_STEPS] = {
    /* whole tables, on a write session (which otherwise runs without sequential scans): allowed here */
    "SET LOCAL enable_seqscan TO on",
    "DELETE FROM tally_lists",
    /* every pair and each kind of its set at position 0, with the oldest retained entry's time */
    "WITH t AS (SELECT coalesce((SELECT at_ms FROM tally_log ORDER BY seq LIMIT 1),"
    "  (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS at)"
    " INSERT INTO tally_lists SELECT r.item, r.\"user\", d.d, 0, t.at, r.kind FROM tally_rows r CROSS JOIN t"
    " CROSS JOIN generate_series(0, 16) AS d(d) WHERE r.kind <> 0 AND (d.d = 0 OR " PG_SET_HAS("r.kind", "d.d") ")",
    /* then each at its last change, and each kind where it last joined, in the retained log */
    "UPDATE tally_lists l SET seq = x.seq, at_ms = x.at_ms FROM (SELECT DISTINCT ON (item, \"user\") item, \"user\","
    " seq, at_ms FROM tally_log WHERE from_kind <> to_kind ORDER BY item, \"user\", seq DESC) x"
    " WHERE l.kind = 0 AND l.item = x.item AND l.\"user\" = x.\"user\"",
    "UPDATE tally_lists l SET seq = x.seq, at_ms = x.at_ms FROM (SELECT DISTINCT ON (item, \"user\", d.d) item,"
    " \"user\", d.d, seq, at_ms FROM tally_log CROSS JOIN generate_series(1, 16) AS d(d)"
    " WHERE " PG_SET_HAS("to_kind", "d.d") " AND NOT " PG_SET_HAS(
        "from_kind", "d.d") " ORDER BY item, \"user\", d.d, seq DESC) x WHERE l.kind = x.d AND l.item = x.item AND "
                            "l.\"user\" = x.\"user\"",
};

int pg_lists_rebuild(store_write_t *w_)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    pg_write_t *w = (pg_write_t *)w_;
    int rc = STORE_OK;
    for (int i = 0; rc == STORE_OK && i < PG_LISTS_BUILD_STEPS; i++)
        rc = pg_wrun(w, "lists-build", PG_LISTS_BUILD_SQL[i], 0, NULL);
    return rc;
}

/* --- pages (their statements are prepared on every reader connection: pg_codec.c) --- */

int pg_read_list(store_read_t *r_, const store_list_query_t *q, store_list_fn fn, void *arg)
{
    pg_read_t *r = (pg_read_t *)r_;
    const pg_store_t *s = r->store;
    if (q->kind < 0 || q->kind > s->kinds.count)
        return STORE_ERROR;
    char key[ID_MAX_LEN + 1], name[ID_MAX_LEN + 1], kind[PG_NUM_LEN], seq[PG_NUM_LEN], limit[PG_NUM_LEN];
    pg_cstr(key, q->key);
    pg_cstr(name, q->has_cursor ? q->name : (span_t){"", 0});
    pg_num(kind, q->kind == KIND_NONE ? 0 : (uint64_t)s->cfg_to_db[q->kind]);
    pg_num(seq, q->has_cursor ? q->seq : UINT64_MAX);
    pg_num(limit, q->limit);
    const char *p[] = {key, kind, seq, name, limit};
    int rc;
    PGresult *res =
        pg_rexec_prepared(r, "read-list",
                          q->kind == KIND_NONE ? (q->by_user ? PG_READ_LIST_ANY_BY_USER : PG_READ_LIST_ANY_BY_ITEM)
                                               : (q->by_user ? PG_READ_LIST_BY_USER : PG_READ_LIST_BY_ITEM),
                          5, p, &rc);
    if (!res)
        return rc;
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        span_t other = {PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)};
        uint64_t pos = strtoull(PQgetvalue(res, i, 1), NULL, 10), at = strtoull(PQgetvalue(res, i, 2), NULL, 10);
        kindset_t set = pg_cfg_set(s, strtol(PQgetvalue(res, i, 3), NULL, 10));
        if (fn(arg, other, pos, at, set) != 0)
            break;
    }
    PQclear(res);
    return STORE_OK;
}

/* --- the check: lists against rows --- */

/* The rows [i, end) of res (ordered by item) whose column 0 is item: *i moves to the first of them, *end
 * past the last; the empty range where there is none. A binary search, in the column's "C" order. */
static void item_range(const PGresult *res, span_t item, int *i, int *end)
{
    int lo = 0, hi = PQntuples(res);
    char it[ID_MAX_LEN + 1];
    pg_cstr(it, item);
    while (lo < hi) { /* the first row not before item */
        int mid = lo + (hi - lo) / 2;
        if (strcmp(PQgetvalue(res, mid, 0), it) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *i = *end = lo;
    while (*end < PQntuples(res) && strcmp(PQgetvalue(res, *end, 0), it) == 0)
        (*end)++;
}

/* One item's merge: its rows' users and sets (columns 1, 2 of rows) against its entries (user, kind,
 * kinds in columns 1-3 of lists), both in user order. */
static uint64_t check_item(const pg_store_t *s, span_t item, const PGresult *rows, const PGresult *lists,
                           store_list_expect_fn expect, void *arg)
{
    uint64_t mismatches = 0;
    int i, nr, j, nl;
    item_range(rows, item, &i, &nr);
    item_range(lists, item, &j, &nl);
    for (; i < nr; i++) {
        const char *user = PQgetvalue(rows, i, 1);
        span_t u = {user, (size_t)PQgetlength(rows, i, 1)};
        /* entries of users before this one have no row */
        for (; j < nl && strcmp(PQgetvalue(lists, j, 1), user) < 0; j++)
            mismatches++;
        kindset_t want = expect(arg, item, u, pg_cfg_set(s, strtol(PQgetvalue(rows, i, 2), NULL, 10)));
        uint32_t want_kinds = want ? db_bits(s, want) | 1u : 0, have_kinds = 0;
        bool set_ok = want == KINDSET_EMPTY;
        for (; j < nl && strcmp(PQgetvalue(lists, j, 1), user) == 0; j++) {
            long kind = strtol(PQgetvalue(lists, j, 2), NULL, 10);
            if (kind < 0 || kind > KINDS_MAX || (have_kinds >> kind & 1u)) {
                mismatches++;
                continue;
            }
            have_kinds |= 1u << kind;
            if (kind == 0)
                set_ok = want && strtol(PQgetvalue(lists, j, 3), NULL, 10) == pg_db_set(s, want);
        }
        mismatches += (uint64_t)__builtin_popcount(have_kinds ^ want_kinds) + (!set_ok && want_kinds == have_kinds);
    }
    return mismatches + (uint64_t)(nl - j);
}

/* The items' rows and entries in two statements, in item then user order; then a merge per item. */
int pg_read_lists_check(store_read_t *r_, const span_t *items, size_t n, store_list_expect_fn expect, void *arg,
                        uint64_t *mismatches)
{
    pg_read_t *r = (pg_read_t *)r_;
    *mismatches = 0;
    if (n == 0)
        return STORE_OK; /* one table holds both indexes: they cannot disagree */
    pg_buf_t list = {0};
    if (pg_buf_items(&list, items, n) != STORE_OK)
        return STORE_ERROR;
    const char *p[] = {list.buf};
    int rc;
    PGresult *rows = pg_rexec(r, "check-rows",
                              "SELECT item, \"user\", kind FROM tally_rows WHERE item = ANY($1::text[])"
                              " ORDER BY item, \"user\"",
                              1, p, &rc);
    PGresult *lists = !rows
                          ? NULL
                          : pg_rexec(r, "check-lists",
                                     "SELECT item, \"user\", kind, kinds FROM tally_lists WHERE item = ANY($1::text[])"
                                     " ORDER BY item, \"user\", kind",
                                     1, p, &rc);
    pg_buf_free(&list);
    for (size_t i = 0; lists && i < n; i++)
        *mismatches += check_item(r->store, items[i], rows, lists, expect, arg);
    PQclear(rows);
    PQclear(lists);
    return rc;
}

/* One item's entries, gathered per user (the kind 0 entry holds the pair's set). */
int pg_read_list_pairs(store_read_t *r_, span_t item, store_pair_fn fn, void *arg)
{
    pg_read_t *r = (pg_read_t *)r_;
    const pg_store_t *s = r->store;
    char it[ID_MAX_LEN + 1];
    pg_cstr(it, item);
    const char *p[] = {it};
    int rc;
    PGresult *res =
        pg_rexec(r, "list-pairs",
                 "SELECT \"user\", kind, kinds FROM tally_lists WHERE item = $1 ORDER BY \"user\", kind", 1, p, &rc);
    if (!res)
        return rc;
    int n = PQntuples(res);
    for (int i = 0; i < n;) {
        span_t user = {PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)};
        kindset_t set = 0, entries = 0;
        for (; i < n && (size_t)PQgetlength(res, i, 0) == user.len &&
               memcmp(PQgetvalue(res, i, 0), user.ptr, user.len) == 0;
             i++) {
            long d = strtol(PQgetvalue(res, i, 1), NULL, 10);
            int code = d == 0 ? KIND_NONE : d <= s->db_kinds ? s->db_to_cfg[d] : -1;
            if (code < 0)
                entries |= (kindset_t)1 << 31; /* no kind of this store: never what a check expects */
            else
                entries |= (kindset_t)1 << code;
            if (d == 0)
                set = pg_cfg_set(s, strtol(PQgetvalue(res, i, 2), NULL, 10));
        }
        if (fn(arg, user, set, entries) != 0)
            break;
    }
    PQclear(res);
    return STORE_OK;
}

/* --- the walks that erase an item or a user (the writer's) --- */

/* Rows of one walk, locked and cached for the row reads that follow, then handed to fn. */
static int walk(pg_write_t *w, const char *sql, span_t fixed, span_t after, size_t limit, int name_col,
                store_name_fn fn, void *arg, size_t *visited, char *last, size_t *last_len)
{
    char f[ID_MAX_LEN + 1], a[ID_MAX_LEN + 1], l[PG_NUM_LEN];
    pg_cstr(f, fixed);
    pg_cstr(a, after);
    pg_num(l, limit);
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
    PG_WRITE_CHECK((pg_write_t *)w_);
    return walk((pg_write_t *)w_,
                "SELECT item, \"user\", kind, version FROM tally_rows WHERE item = $1 AND \"user\" > $2 AND kind <> 0"
                " ORDER BY \"user\" LIMIT $3 FOR UPDATE",
                item, after, limit, 1, fn, arg, visited, NULL, NULL);
}

int pg_user_items(store_write_t *w_, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                  size_t *visited, char last[ID_MAX_LEN], size_t *last_len)
{
    PG_WRITE_CHECK((pg_write_t *)w_);
    *last_len = 0;
    return walk((pg_write_t *)w_,
                "SELECT item, \"user\", kind, version FROM tally_rows WHERE \"user\" = $1 AND item > $2 AND kind <> 0"
                " ORDER BY item LIMIT $3 FOR UPDATE",
                user, after, limit, 0, fn, arg, visited, last, last_len);
}
