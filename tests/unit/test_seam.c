/* test_seam.c — one table of cases against store.h, run on every store: the embedded store (LMDB, in
 * a temporary directory) always, and the PostgreSQL store when TALLY_SEAM_PG names a server (a
 * libpq URI with %s where the database's name goes: each case gets a database of its own, made
 * here; tests/pg/seam.py starts a throwaway cluster and runs `unit_tests seam` with it).
 *
 * A case says what store.h promises, so where the stores may differ (positions given at append or at
 * commit, key order, what a store refuses) it asks the store (store_shared, store_folds_apart) and
 * checks what the contract says of that kind of store. */
#include <libpq-fe.h> /* only to make each case's database */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/pipeline.h"
#include "store/store.h"
#include "unit.h"

typedef struct {
    const char *name;   /* "lmdb", "pg" */
    const char *pg_uri; /* the PostgreSQL store: the URI template; NULL: the embedded store */
    char base[64];      /* the embedded store: the directory the cases' directories go in */
    unsigned serial;    /* cases run so far (names the next case's database or directory) */
    char location[600]; /* the open case's */
    kinds_t kinds;
    store_t *store; /* the open case's (a case that reopens it sets it) */
} seam_t;

static bool is_pg(const seam_t *t)
{
    return t->pg_uri != NULL;
}

/* A fresh, empty location for the next case. */
static bool seam_location(seam_t *t)
{
    t->serial++;
    if (!is_pg(t)) {
        snprintf(t->location, sizeof t->location, "%s/case%u", t->base, t->serial);
        return true;
    }
    char db[64], admin[600];
    snprintf(db, sizeof db, "seam_%ld_%u", (long)getpid(), t->serial);
    snprintf(admin, sizeof admin, t->pg_uri, "postgres");
    snprintf(t->location, sizeof t->location, t->pg_uri, db);
    PGconn *conn = PQconnectdb(admin);
    bool ok = PQstatus(conn) == CONNECTION_OK;
    if (ok) {
        char sql[128];
        snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\"", db);
        PGresult *res = PQexec(conn, sql);
        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            fprintf(stderr, "seam: %s: %s", sql, PQerrorMessage(conn));
        PQclear(res);
    } else {
        fprintf(stderr, "seam: cannot connect to %s: %s", admin, PQerrorMessage(conn));
    }
    PQfinish(conn);
    return ok;
}

static store_t *seam_open_kinds(seam_t *t, const char *list, char err[256])
{
    store_t *s = NULL;
    kinds_parse(&t->kinds, list, err, 256);
    store_options_t opt = {.map_size_bytes = 1ull << 30, .checkpoint_interval_ms = 100ull * 365 * 24 * 3600 * 1000};
    return store_open(t->location, &t->kinds, &opt, &s, err, 256) == STORE_OK ? s : NULL;
}

static store_t *seam_open(seam_t *t)
{
    char err[256] = "";
    store_t *s = seam_open_kinds(t, "like,dislike", err);
    if (!s)
        fprintf(stderr, "seam %s: open %s: %s\n", t->name, t->location, err);
    return s;
}

/* A transaction that may fold: the fold's own on a store that folds apart, else the writer's. */
static int fold_begin(store_t *s, store_write_t **w)
{
    return store_folds_apart(s) ? store_fold_begin(s, w) : store_write_begin(s, w);
}

/* Applies one transition the way the writer does: row, then log. */
static int apply(store_write_t *w, const char *item, const char *user, int to, uint64_t at_ms)
{
    reaction_row_t row;
    int rc = store_row_get(w, span_of(item), span_of(user), &row);
    kindset_t set = kindset_of(to);
    if (rc != STORE_OK || row.set == set)
        return rc;
    reaction_row_t next = {set, row.version + 1};
    transition_t tr = {span_of(item), span_of(user), row.set, set, next.version, at_ms, 0};
    uint64_t seq;
    rc = store_row_put(w, span_of(item), span_of(user), &next);
    return rc == STORE_OK ? store_log_append(w, &tr, &seq) : rc;
}

/* Folds the whole log into the counts and the lists. */
static bool fold_all(store_t *s)
{
    store_write_t *w;
    pipeline_result_t res = {0};
    if (fold_begin(s, &w) != STORE_OK)
        return false;
    if (!store_write_may_fold(w) || pipeline_fold(w, 1u << 20, &res) != STORE_OK) {
        store_write_abort(w);
        return false;
    }
    return store_write_commit(w) == STORE_OK && !res.more;
}

typedef struct {
    uint64_t seq[16], at[16];
    char names[16][32];
    size_t n;
} log_seen_t;

static int log_see(void *arg, uint64_t seq, const transition_t *tr)
{
    log_seen_t *l = arg;
    if (l->n < 16) {
        l->seq[l->n] = seq;
        l->at[l->n] = tr->at_ms;
        snprintf(l->names[l->n], sizeof l->names[0], "%.*s/%.*s:%d>%d", (int)tr->item.len, tr->item.ptr,
                 (int)tr->user.len, tr->user.ptr, kindset_single(tr->from), kindset_single(tr->to));
    }
    l->n++;
    return 0;
}

/* --- the cases --- */

/* What a store says of itself, and its kinds: the one it was opened with, a kind removed refused. */
static void case_open(seam_t *t, store_t *s)
{
    const kinds_t *k = store_kinds(s);
    CHECK(k && k->count == 2 && strcmp(kinds_name(k, 1), "like") == 0 && strcmp(kinds_name(k, 2), "dislike") == 0);
    CHECK(store_shared(s) == is_pg(t));
    CHECK(store_folds_apart(s) == is_pg(t));
    CHECK(store_ready(s));
    char why[128] = "";
    CHECK(!store_writes_refused(s, why, sizeof why));
    store_stats_t st;
    CHECK(store_stats(s, &st) == STORE_OK && st.shared == is_pg(t));
    CHECK(!store_pending(s) && store_flush(s) == STORE_OK);
    store_close(s);
    char err[256] = "";
    CHECK(seam_open_kinds(t, "like", err) == NULL && err[0]); /* a stored kind no longer configured */
    t->store = seam_open(t);
    CHECK(t->store != NULL);
}

/* A write transaction: its rows and log as it sees them, the positions its entries take, an abort
 * that leaves nothing. */
static void case_write(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    reaction_row_t row;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_row_get(w, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == KINDSET_EMPTY &&
          row.version == 0);
    uint64_t seqs[3];
    const char *users[] = {"u1", "u2", "u1"};
    const int to[] = {1, 2, 2};
    for (int i = 0; i < 3; i++) {
        CHECK(store_row_get(w, SPAN_LIT("i1"), span_of(users[i]), &row) == STORE_OK);
        reaction_row_t next = {kindset_of(to[i]), row.version + 1};
        CHECK(store_row_put(w, SPAN_LIT("i1"), span_of(users[i]), &next) == STORE_OK);
        transition_t tr = {SPAN_LIT("i1"), span_of(users[i]), row.set, next.set, next.version, 1000 + (uint64_t)i, 0};
        CHECK(store_log_append(w, &tr, &seqs[i]) == STORE_OK);
    }
    CHECK(store_row_get(w, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == kindset_of(2) &&
          row.version == 2);
    uint64_t base = 0;
    CHECK(store_write_commit_at(w, &base) == STORE_OK);
    for (int i = 0; i < 3; i++)
        if (seqs[i] == 0)
            seqs[i] = base + (uint64_t)i + 1; /* positions taken at commit */
    CHECK(seqs[0] >= 1 && seqs[1] == seqs[0] + 1 && seqs[2] == seqs[1] + 1);

    store_read_t *r;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_row(r, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == kindset_of(2) &&
          row.version == 2);
    CHECK(store_read_row(r, SPAN_LIT("i1"), SPAN_LIT("u3"), &row) == STORE_OK && row.version == 0);
    uint64_t first = 0, last = 0, oldest = 0, newest = 0;
    CHECK(store_read_log_bounds(r, &first, &last) == STORE_OK && first == seqs[0] && last == seqs[2]);
    CHECK(store_read_log_window(r, &oldest, &newest) == STORE_OK && oldest == seqs[0] && newest == seqs[2]);
    log_seen_t seen = {0};
    CHECK(store_read_log(r, 0, 10, log_see, &seen) == STORE_OK && seen.n == 3);
    CHECK(seen.seq[0] == seqs[0] && seen.seq[2] == seqs[2] && seen.at[1] == 1001);
    CHECK(strcmp(seen.names[0], "i1/u1:0>1") == 0 && strcmp(seen.names[2], "i1/u1:1>2") == 0);
    /* as many items as asked, an id asked twice included, in one call */
    int64_t tally[3][KINDS_MAX + 1];
    const span_t asked[] = {SPAN_LIT("i1"), SPAN_LIT("nobody"), SPAN_LIT("i1")};
    CHECK(store_read_tally_items(r, asked, 3, tally) == STORE_OK && tally[0][1] == 0 && tally[0][2] == 2);
    CHECK(tally[1][0] == 0 && tally[1][1] == 0 && tally[1][2] == 0 && tally[2][2] == 2 && tally[2][0] == 2);
    store_read_end(r);

    /* aborted: nothing of it stays, not even its positions */
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "i1", "ghost", 1, 2000) == STORE_OK);
    store_write_abort(w);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_row_get(w, SPAN_LIT("i1"), SPAN_LIT("ghost"), &row) == STORE_OK && row.version == 0);
    CHECK(apply(w, "i2", "u1", 1, 3000) == STORE_OK);
    CHECK(store_write_commit_at(w, &base) == STORE_OK);
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_log_bounds(r, &first, &last) == STORE_OK && last == seqs[2] + 1);
    store_read_end(r);

    /* a position given (a moved store): above every position, and the log goes on after it */
    CHECK(store_write_begin(s, &w) == STORE_OK);
    transition_t moved = {SPAN_LIT("i3"), SPAN_LIT("u9"), KINDSET_EMPTY, kindset_of(1), 1, 4000, 0};
    CHECK(store_log_put(w, 100, &moved) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "i3", "u8", 1, 5000) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_log_bounds(r, &first, &last) == STORE_OK && first == seqs[0] && last == 101);
    store_read_end(r);
}

/* The counts and the checkpoint: written by a transaction that may fold, read from snapshots. */
static void case_counts(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_write_may_fold(w) == !store_folds_apart(s));
    for (int u = 0; u < 5; u++) {
        char user[16];
        snprintf(user, sizeof user, "u%d", u);
        CHECK(apply(w, "item", user, 1 + (u == 4), 1000) == STORE_OK);
    }
    CHECK(store_write_commit(w) == STORE_OK);

    CHECK(fold_begin(s, &w) == STORE_OK);
    CHECK(store_write_may_fold(w));
    uint64_t cp = 99;
    CHECK(store_checkpoint_get(w, &cp) == STORE_OK && cp == 0);
    log_seen_t seen = {0};
    CHECK(store_log_scan(w, cp, 3, log_see, &seen) == STORE_OK && seen.n == 3);
    int64_t deltas[KINDS_MAX + 1] = {0};
    deltas[1] = 4;
    deltas[2] = 1;
    CHECK(store_counts_add(w, SPAN_LIT("item"), deltas) == STORE_OK);
    CHECK(store_counts_add(w, SPAN_LIT("item"), deltas) == STORE_OK); /* adds */
    CHECK(store_checkpoint_put(w, seen.seq[2]) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);

    store_read_t *r;
    int64_t counts[KINDS_MAX + 1];
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("item"), counts) == STORE_OK && counts[1] == 8 && counts[2] == 2);
    CHECK(store_read_counts(r, SPAN_LIT("nobody"), counts) == STORE_OK && counts[1] == 0 && counts[2] == 0);
    CHECK(store_read_checkpoint(r, &cp) == STORE_OK && cp == seen.seq[2]);
    CHECK(store_read_tally_items(r, &SPAN_LIT("item"), 1, &counts) == STORE_OK && counts[1] == 4 && counts[2] == 1);
    store_read_end(r);

    CHECK(fold_begin(s, &w) == STORE_OK);
    CHECK(store_checkpoint_get(w, &cp) == STORE_OK && cp == seen.seq[2]);
    deltas[1] = -8;
    deltas[2] = -2;
    CHECK(store_counts_add(w, SPAN_LIT("item"), deltas) == STORE_OK);
    store_write_abort(w); /* an aborted fold changes nothing */
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("item"), counts) == STORE_OK && counts[1] == 8);
    store_read_end(r);
}

typedef struct {
    size_t n;
    char names[8][32];
} names_t;

static int name_see(void *arg, span_t name)
{
    names_t *a = arg;
    if (a->n < 8)
        snprintf(a->names[a->n], sizeof a->names[0], "%.*s", (int)name.len, name.ptr);
    a->n++;
    return 0;
}

/* Snapshots: one state however many questions; a single question's snapshot; a page's counts and
 * rows at once (read_many) as the questions one by one. */
static void case_snapshots(seam_t *t, store_t *s)
{
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "a", "u1", 1, 1000) == STORE_OK);
    CHECK(apply(w, "b", "u1", 2, 1000) == STORE_OK);
    CHECK(apply(w, "b", "u2", 1, 1000) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(fold_all(s));

    store_read_t *r, *single;
    uint64_t first, last, last2;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_log_bounds(r, &first, &last) == STORE_OK && last == first + 2);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "c", "u1", 1, 2000) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_read_log_bounds(r, &first, &last2) == STORE_OK && last2 == last); /* the snapshot's state */
    int64_t counts[KINDS_MAX + 1];
    CHECK(store_read_counts(r, SPAN_LIT("b"), counts) == STORE_OK && counts[1] == 1 && counts[2] == 1);
    store_read_end(r);

    CHECK(store_read_begin_single(s, &single) == STORE_OK);
    CHECK(store_read_log_bounds(single, &first, &last2) == STORE_OK && last2 == last + 1);
    /* a second question: the PostgreSQL store refuses it, the embedded one answers */
    CHECK((store_read_counts(single, SPAN_LIT("b"), counts) == STORE_ERROR) == is_pg(t));
    store_read_end(single);

    const span_t items[] = {SPAN_LIT("a"), SPAN_LIT("b"), SPAN_LIT("none")};
    int64_t many[3][KINDS_MAX + 1];
    reaction_row_t rows[3];
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_many(r, items, 3, SPAN_LIT("u1"), many, rows) == STORE_OK);
    for (int i = 0; i < 3; i++) {
        reaction_row_t one;
        CHECK(store_read_counts(r, items[i], counts) == STORE_OK);
        CHECK(memcmp(counts, many[i], sizeof counts) == 0);
        CHECK(store_read_row(r, items[i], SPAN_LIT("u1"), &one) == STORE_OK);
        CHECK(one.set == rows[i].set && one.version == rows[i].version);
    }
    CHECK(rows[1].set == kindset_of(2) && rows[2].version == 0 && many[1][1] == 1 && many[2][1] == 0);
    CHECK(store_read_many(r, items, 2, (span_t){0}, many, NULL) == STORE_OK && many[0][1] == 1);
    names_t seen = {0};
    size_t visited = 0;
    CHECK(store_read_items(r, (span_t){0}, 10, name_see, &seen, &visited) == STORE_OK);
    CHECK(visited == 3 && seen.n == 3 && strcmp(seen.names[0], "a") == 0 && strcmp(seen.names[2], "c") == 0);
    seen = (names_t){0};
    CHECK(store_read_items(r, SPAN_LIT("a"), 1, name_see, &seen, &visited) == STORE_OK);
    CHECK(visited == 1 && strcmp(seen.names[0], "b") == 0);
    CHECK(store_read_acknowledged(r) == 0 || store_read_acknowledged(r) >= last + 1);
    store_read_end(r);
}

static int count_idem(void *arg, span_t user, span_t key, const store_idem_t *rec)
{
    (void)user;
    (void)key;
    (void)rec;
    (*(size_t *)arg)++;
    return 0;
}

/* Idempotency records: put, get, a missing one, expiry, a replaced record's expiry, a user's erased. */
static void case_idem(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    store_idem_t rec = {
        .expires_ms = 5000, .status = 200, .type = 0, .has_etag = 1, .etag_version = 7, .body = SPAN_LIT("{\"ok\":1}")};
    memset(rec.fingerprint, 0xab, sizeof rec.fingerprint);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_put(w, SPAN_LIT("u1"), SPAN_LIT("k1"), &rec) == STORE_OK);
    rec.expires_ms = 9000;
    CHECK(store_idem_put(w, SPAN_LIT("u2"), SPAN_LIT("k1"), &rec) == STORE_OK);
    CHECK(store_idem_put(w, SPAN_LIT("u2"), SPAN_LIT("k2"), &rec) == STORE_OK);
    store_idem_t got;
    CHECK(store_idem_get(w, SPAN_LIT("u1"), SPAN_LIT("k1"), &got) == STORE_OK);
    CHECK(got.expires_ms == 5000 && got.status == 200 && got.etag_version == 7 && span_eq_str(got.body, "{\"ok\":1}"));
    CHECK(got.fingerprint[0] == 0xab && got.fingerprint[FINGERPRINT_LEN - 1] == 0xab);
    CHECK(store_idem_get(w, SPAN_LIT("u1"), SPAN_LIT("k2"), &got) == STORE_NOTFOUND);
    CHECK(store_idem_get(w, SPAN_LIT("u"), SPAN_LIT("1k1"), &got) == STORE_NOTFOUND);
    CHECK(store_write_commit(w) == STORE_OK);

    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_get(w, SPAN_LIT("u2"), SPAN_LIT("k1"), &got) == STORE_OK && got.expires_ms == 9000 &&
          span_eq_str(got.body, "{\"ok\":1}"));
    size_t deleted = 99;
    CHECK(store_idem_sweep(w, 4999, 10, &deleted) == STORE_OK && deleted == 0);
    CHECK(store_idem_sweep(w, 5000, 10, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_idem_get(w, SPAN_LIT("u1"), SPAN_LIT("k1"), &got) == STORE_NOTFOUND);
    rec.expires_ms = 20000; /* replaced: the old expiry no longer deletes it */
    CHECK(store_idem_put(w, SPAN_LIT("u2"), SPAN_LIT("k1"), &rec) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);

    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_sweep(w, 10000, 10, &deleted) == STORE_OK && deleted == 1); /* u2/k2 only */
    CHECK(store_idem_get(w, SPAN_LIT("u2"), SPAN_LIT("k1"), &got) == STORE_OK && got.expires_ms == 20000);
    CHECK(store_idem_put(w, SPAN_LIT("u3"), SPAN_LIT("k1"), &rec) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);

    store_read_t *r;
    size_t n = 0;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_idem(r, count_idem, &n) == STORE_OK && n == 2);
    store_read_end(r);

    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_delete_user(w, SPAN_LIT("u2"), 10, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_idem_get(w, SPAN_LIT("u2"), SPAN_LIT("k1"), &got) == STORE_NOTFOUND);
    CHECK(store_idem_get(w, SPAN_LIT("u3"), SPAN_LIT("k1"), &got) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
}

typedef struct {
    char keys[4][32], values[4][32];
    size_t n;
} aux_seen_t;

static int aux_see(void *arg, span_t key, span_t value)
{
    aux_seen_t *a = arg;
    if (span_eq_str(key, STORE_LOG_PRUNED_KEY))
        return 0; /* the PostgreSQL store's own record of its pruning (case_log) */
    if (a->n < 4) {
        snprintf(a->keys[a->n], sizeof a->keys[0], "%.*s", (int)key.len, key.ptr);
        snprintf(a->values[a->n], sizeof a->values[0], "%.*s", (int)value.len, value.ptr);
    }
    a->n++;
    return 0;
}

/* Auxiliary records: the transaction's own view (its puts and deletions), then snapshots'. */
static void case_aux(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_aux_put(w, SPAN_LIT("webhook/b/d"), SPAN_LIT("{}")) == STORE_OK);
    CHECK(store_aux_put(w, SPAN_LIT("webhook/a/d"), SPAN_LIT("{\"a\":1}")) == STORE_OK);
    CHECK(store_aux_put(w, SPAN_LIT("other/x"), SPAN_LIT("x")) == STORE_OK);
    aux_seen_t seen = {0};
    CHECK(store_aux_read_locked(w, SPAN_LIT("webhook/"), aux_see, &seen) == STORE_OK);
    CHECK(seen.n == 2 && strcmp(seen.keys[0], "webhook/a/d") == 0 && strcmp(seen.values[0], "{\"a\":1}") == 0 &&
          strcmp(seen.keys[1], "webhook/b/d") == 0);
    CHECK(store_write_commit(w) == STORE_OK);

    store_read_t *r;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    seen = (aux_seen_t){0};
    CHECK(store_read_aux(r, SPAN_LIT("webhook/"), aux_see, &seen) == STORE_OK && seen.n == 2);
    store_read_end(r);

    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_aux_put(w, SPAN_LIT("webhook/b/d"), SPAN_LIT("{\"b\":2}")) == STORE_OK); /* replaced */
    CHECK(store_aux_delete_range(w, SPAN_LIT("webhook/a/"), SPAN_LIT("webhook/a0")) == STORE_OK);
    seen = (aux_seen_t){0};
    CHECK(store_aux_read_locked(w, SPAN_LIT("webhook/"), aux_see, &seen) == STORE_OK);
    CHECK(seen.n == 1 && strcmp(seen.values[0], "{\"b\":2}") == 0);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_read_begin(s, &r) == STORE_OK);
    seen = (aux_seen_t){0};
    CHECK(store_read_aux(r, SPAN_LIT(""), aux_see, &seen) == STORE_OK && seen.n == 2);
    CHECK(strcmp(seen.keys[0], "other/x") == 0 && strcmp(seen.keys[1], "webhook/b/d") == 0);
    store_read_end(r);
}

/* The log: a scan from a position, the seek by time, pruning from the oldest by position and age. */
static void case_log(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    for (int i = 0; i < 10; i++) {
        char user[16];
        snprintf(user, sizeof user, "u%d", i);
        CHECK(apply(w, "item", user, 1, 1000 + (uint64_t)i) == STORE_OK);
    }
    CHECK(store_write_commit(w) == STORE_OK);
    store_read_t *r;
    uint64_t first, last, seq;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_log_bounds(r, &first, &last) == STORE_OK && last == first + 9);
    log_seen_t seen = {0};
    CHECK(store_read_log(r, first + 1, 3, log_see, &seen) == STORE_OK && seen.n == 3 && seen.seq[0] == first + 2 &&
          seen.at[2] == 1004);
    CHECK(store_read_log_seek(r, 1005, &seq) == STORE_OK && seq == first + 5);
    CHECK(store_read_log_seek(r, 0, &seq) == STORE_OK && seq == first);
    CHECK(store_read_log_seek(r, 9999, &seq) == STORE_OK && seq == last + 1);
    store_read_end(r);

    CHECK(store_write_begin(s, &w) == STORE_OK);
    seen = (log_seen_t){0};
    CHECK(store_log_scan(w, first + 7, 100, log_see, &seen) == STORE_OK && seen.n == 2 && seen.seq[1] == last);
    size_t deleted = 99;
    CHECK(store_log_prune(w, first + 2, UINT64_MAX, 100, &deleted) == STORE_OK && deleted == 3); /* by position */
    CHECK(store_log_prune(w, last, 1005, 100, &deleted) == STORE_OK && deleted == 2);            /* by age */
    CHECK(store_log_prune(w, last, UINT64_MAX, 1, &deleted) == STORE_OK && deleted == 1);        /* by limit */
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_log_bounds(r, &seq, &last) == STORE_OK && seq == first + 6);
    /* the window's oldest is the first position not pruned, on either store (the PostgreSQL store
     * keeps it as STORE_LOG_PRUNED_KEY, as its log may have gaps) */
    uint64_t oldest = 0, newest = 0;
    CHECK(store_read_log_window(r, &oldest, &newest) == STORE_OK && oldest == first + 6 && newest >= last);
    store_read_end(r);
}

typedef struct {
    char text[128];
} list_seen_t;

static int list_see(void *arg, span_t name, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    (void)seq;
    (void)at_ms;
    list_seen_t *l = arg;
    size_t len = strlen(l->text);
    snprintf(l->text + len, sizeof l->text - len, "%.*s:%u,", (int)name.len, name.ptr, (unsigned)set);
    return 0;
}

/* The row's set, or none for the pair arg names ("item/user"): a check must then find it. */
static kindset_t expect_row(void *arg, span_t item, span_t user, kindset_t row_set)
{
    char pair[2 * ID_MAX_LEN + 2];
    snprintf(pair, sizeof pair, "%.*s/%.*s", (int)item.len, item.ptr, (int)user.len, user.ptr);
    return arg && strcmp(arg, pair) == 0 ? KINDSET_EMPTY : row_set;
}

static uint64_t lists_check(store_read_t *r, const span_t *items, size_t n, const char *wrong)
{
    uint64_t mismatches = 99;
    return store_read_lists_check(r, items, n, expect_row, (void *)wrong, &mismatches) == STORE_OK ? mismatches : 99;
}

static const char *list_of(store_t *s, bool by_user, const char *key, int kind, list_seen_t *l)
{
    store_read_t *r;
    l->text[0] = '\0';
    store_list_query_t q = {.by_user = by_user, .key = span_of(key), .kind = kind, .limit = 10};
    if (store_read_begin_single(s, &r) != STORE_OK)
        return "";
    if (store_read_list(r, &q, list_see, l) != STORE_OK)
        snprintf(l->text, sizeof l->text, "error");
    store_read_end(r);
    return l->text;
}

/* The lists, kept by the fold: by item and by user, under any kind and under each; the check that
 * they equal the rows; a rebuild; the walks an erasure makes. */
static void case_lists(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "i1", "u1", 1, 1000) == STORE_OK);
    CHECK(apply(w, "i1", "u2", 2, 1001) == STORE_OK);
    CHECK(apply(w, "i2", "u1", 1, 1002) == STORE_OK);
    CHECK(apply(w, "i3", "u1", 2, 1003) == STORE_OK);
    CHECK(apply(w, "i3", "u1", KIND_NONE, 1004) == STORE_OK); /* none: in no list */
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(fold_all(s));
    list_seen_t l;
    CHECK(strcmp(list_of(s, false, "i1", KIND_NONE, &l), "u2:4,u1:2,") == 0); /* newest first */
    CHECK(strcmp(list_of(s, false, "i1", 1, &l), "u1:2,") == 0);
    CHECK(strcmp(list_of(s, true, "u1", KIND_NONE, &l), "i2:2,i1:2,") == 0);
    CHECK(strcmp(list_of(s, true, "u1", 2, &l), "") == 0);
    CHECK(strcmp(list_of(s, true, "nobody", KIND_NONE, &l), "") == 0);

    store_read_t *r;
    const span_t items[] = {SPAN_LIT("i3"), SPAN_LIT("i1"), SPAN_LIT("nobody"), SPAN_LIT("i2")};
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(lists_check(r, items + 1, 1, NULL) == 0);
    CHECK(lists_check(r, NULL, 0, NULL) == 0); /* the two indexes */
    CHECK(lists_check(r, items, 4, NULL) == 0);
    /* a pair expected otherwise is found on its own item, whichever items are checked with it */
    uint64_t alone = lists_check(r, items + 3, 1, "i2/u1");
    CHECK(alone > 0 && alone != 99 && lists_check(r, items, 4, "i2/u1") == alone);
    CHECK(lists_check(r, items, 3, "i2/u1") == 0 && lists_check(r, items, 4, "i1/u2") > 0);
    store_read_end(r);

    CHECK(fold_begin(s, &w) == STORE_OK);
    CHECK(store_lists_rebuild(w) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(strcmp(list_of(s, false, "i1", KIND_NONE, &l), "u2:4,u1:2,") == 0);
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(lists_check(r, items, 4, NULL) == 0);
    store_read_end(r);

    /* the walks: an item's users (rows, none included), a user's items (set only) */
    names_t seen = {0};
    size_t visited = 0, last_len = 0;
    char last[ID_MAX_LEN];
    CHECK(fold_begin(s, &w) == STORE_OK);
    CHECK(store_item_users(w, SPAN_LIT("i1"), (span_t){0}, 10, name_see, &seen, &visited) == STORE_OK);
    CHECK(visited == 2 && strcmp(seen.names[0], "u1") == 0 && strcmp(seen.names[1], "u2") == 0);
    seen = (names_t){0};
    CHECK(store_item_users(w, SPAN_LIT("i1"), SPAN_LIT("u1"), 10, name_see, &seen, &visited) == STORE_OK);
    CHECK(visited == 1 && strcmp(seen.names[0], "u2") == 0);
    seen = (names_t){0};
    CHECK(store_user_items(w, SPAN_LIT("u1"), (span_t){0}, 10, name_see, &seen, &visited, last, &last_len) == STORE_OK);
    CHECK(visited == 2 && strcmp(seen.names[0], "i1") == 0 && strcmp(seen.names[1], "i2") == 0);
    seen = (names_t){0};
    CHECK(store_user_items(w, SPAN_LIT("u1"), (span_t){0}, 1, name_see, &seen, &visited, last, &last_len) == STORE_OK);
    CHECK(visited == 1 && strcmp(seen.names[0], "i1") == 0);
    store_write_abort(w);
}

typedef struct {
    size_t n, none;
    char last_item[ID_MAX_LEN + 1], last_user[ID_MAX_LEN + 1];
    bool late;
} page_seen_t;

static int page_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    page_seen_t *p = arg;
    snprintf(p->last_item, sizeof p->last_item, "%.*s", (int)item.len, item.ptr);
    snprintf(p->last_user, sizeof p->last_user, "%.*s", (int)user.len, user.ptr);
    p->late |= strcmp(p->last_user, "late") == 0;
    p->n++;
    p->none += row->set == KINDSET_EMPTY;
    return 0;
}

static int row_count(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    (void)item;
    (void)user;
    (void)row;
    (*(size_t *)arg)++;
    return 0;
}

/* An export's pages: each after the one before, every row once, from one snapshot that later writes
 * do not change. */
static void case_export(seam_t *t, store_t *s)
{
    (void)t;
    store_write_t *w;
    char item[32], user[32];
    CHECK(store_write_begin(s, &w) == STORE_OK);
    for (int i = 0; i < 25; i++)
        for (int u = 0; u < 10; u++) {
            snprintf(item, sizeof item, "i%d", i);
            snprintf(user, sizeof user, "u%d", u);
            CHECK(apply(w, item, user, 1 + u % 2, 1000) == STORE_OK);
            if (u == 3) /* a row at none: visited, not exported */
                CHECK(apply(w, item, user, KIND_NONE, 1000) == STORE_OK);
        }
    CHECK(store_write_commit(w) == STORE_OK);
    store_read_t *snap;
    page_seen_t seen = {0};
    size_t visited = 0, pages = 0;
    CHECK(store_read_begin(s, &snap) == STORE_OK);
    do {
        CHECK(store_export_page(snap, span_of(seen.last_item), span_of(seen.last_user), 7, page_row, &seen, &visited) ==
              STORE_OK);
        if (pages++ == 0) { /* after the first page: not in the export */
            CHECK(store_write_begin(s, &w) == STORE_OK);
            CHECK(apply(w, "i0", "late", 1, 2000) == STORE_OK);
            CHECK(store_write_commit(w) == STORE_OK);
        }
    } while (visited == 7 && pages < 100);
    CHECK(seen.n == 250 && seen.none == 25 && !seen.late);
    CHECK(pages == 36); /* 250 rows, 7 a page: 35 full and one short */
    size_t rows = 0;
    CHECK(store_read_rows(snap, row_count, &rows) == STORE_OK && rows == 250);
    store_read_end(snap);
}

static bool more_waits(void *arg)
{
    (void)arg;
    return true;
}

/* A commit whose effects may be shown later (store_write_defer: more commands wait): durable and its
 * row read at once, its position within the window of cursors given; store_flush shows the rest. */
static void case_defer(seam_t *t, store_t *s)
{
    store_write_t *w;
    uint64_t seq = 0, base = 0;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    reaction_row_t row = {kindset_of(1), 1};
    transition_t tr = {SPAN_LIT("i1"), SPAN_LIT("u1"), KINDSET_EMPTY, row.set, 1, 1000, 0};
    CHECK(store_row_put(w, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK);
    CHECK(store_log_append(w, &tr, &seq) == STORE_OK);
    store_write_defer(w, more_waits, NULL);
    CHECK(store_write_commit_at(w, &base) == STORE_OK);
    if (seq == 0)
        seq = base + 1;
    store_read_t *r;
    uint64_t oldest = 0, newest = 0, first = 0, last = 0;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_row(r, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == kindset_of(1) &&
          row.version == 1);
    CHECK(store_read_log_window(r, &oldest, &newest) == STORE_OK && newest >= seq);
    store_read_end(r);
    if (is_pg(t))
        CHECK(!store_pending(s)); /* its snapshots show every answered write */
    CHECK(store_flush(s) == STORE_OK && !store_pending(s));
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_log_bounds(r, &first, &last) == STORE_OK && last == seq);
    store_read_end(r);
}

/* What each store refuses, as store.h says. */
static void case_errors(seam_t *t, store_t *s)
{
    store_write_t *w;
    /* a backup: the embedded store's into an empty directory only; never the PostgreSQL store's */
    char dir[700];
    snprintf(dir, sizeof dir, "%s-backup", is_pg(t) ? "/tmp/tally-seam-pg" : t->location);
    if (is_pg(t)) {
        CHECK(store_backup(s, "/tmp") == STORE_ERROR);
    } else {
        CHECK(mkdir(dir, 0700) == 0);
        CHECK(store_backup(s, dir) == STORE_OK);
        CHECK(store_backup(s, dir) == STORE_ERROR); /* no longer empty */
    }
    /* a fold transaction: only on a store that folds apart */
    if (!store_folds_apart(s)) {
        w = NULL;
        CHECK(store_fold_begin(s, &w) == STORE_ERROR);
    }
    /* nothing found is not an error */
    store_idem_t got;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_get(w, SPAN_LIT("u"), SPAN_LIT("k"), &got) == STORE_NOTFOUND);
    store_write_abort(w);
    /* a location that cannot be opened */
    store_t *bad = NULL;
    char err[256] = "";
    store_options_t opt = {.map_size_bytes = 1ull << 30};
    const char *where = is_pg(t) ? "postgresql://postgres@127.0.0.1:1/none?connect_timeout=2" : "/dev/null/store";
    CHECK(store_open(where, &t->kinds, &opt, &bad, err, sizeof err) == STORE_ERROR && bad == NULL && err[0]);
}

/* One store_claims_apply call: claims[i] of (user, key, fingerprint byte, release), applied at now_ms
 * with expiry expires_ms; held gets each result. */
typedef struct {
    const char *user, *key;
    uint8_t fp;
    bool release;
} claim_spec_t;

static int claims_run(store_write_t *w, const claim_spec_t *spec, size_t n, uint64_t now_ms, uint64_t expires_ms,
                      bool *held)
{
    store_claim_t c[8];
    uint8_t fps[8][FINGERPRINT_LEN];
    for (size_t i = 0; i < n; i++) {
        memset(fps[i], spec[i].fp, FINGERPRINT_LEN);
        c[i] = (store_claim_t){.release = spec[i].release,
                               .user = span_of(spec[i].user),
                               .key = span_of(spec[i].key),
                               .fingerprint = fps[i],
                               .expires_ms = expires_ms};
    }
    int rc = store_claims_apply(w, c, n, now_ms);
    for (size_t i = 0; i < n; i++)
        held[i] = c[i].held;
    return rc;
}

/* Idempotency claims: taken, held, refused, released only by their own fingerprint, replaced once
 * expired, swept, kept across a reopen; on a shared store, a claim another node inserted meanwhile. */
static void case_claims(seam_t *t, store_t *s)
{
    store_write_t *w;
    bool h[8];
    /* in one call, each claim sees the ones before it */
    const claim_spec_t first[] = {{"u1", "k1", 0xa, false}, {"u1", "k1", 0xa, false}, {"u1", "k1", 0xb, false},
                                  {"u2", "k1", 0xb, false}, {"u1", "k1", 0xb, true},  {"u1", "k2", 0xc, false},
                                  {"u1", "k2", 0xc, true}};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, first, 7, 1000, 5000, h) == STORE_OK);
    CHECK(h[0] && h[1] && !h[2] && h[3] && !h[4] && h[5] && h[6]);
    CHECK(store_write_commit(w) == STORE_OK);

    /* committed: still held by 0xa; released by it, then 0xb takes the key (in one transaction) */
    const claim_spec_t second[] = {
        {"u1", "k1", 0xb, false}, {"u1", "k1", 0xa, true}, {"u1", "k1", 0xb, false}, {"u1", "k2", 0xd, false}};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, second, 4, 2000, 6000, h) == STORE_OK);
    CHECK(!h[0] && h[1] && h[2] && h[3]); /* u1/k2: taken and released before, so free */
    CHECK(store_write_commit(w) == STORE_OK);

    /* an aborted transaction leaves nothing */
    const claim_spec_t lost[] = {{"u3", "k1", 0xa, false}};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, lost, 1, 2000, 6000, h) == STORE_OK && h[0]);
    store_write_abort(w);

    /* reopened: what was committed is there; expiry at or before now frees the key for another */
    store_close(s);
    s = t->store = seam_open(t);
    CHECK(s != NULL);
    if (!s)
        return;
    const claim_spec_t third[] = {{"u1", "k1", 0xa, false}, {"u3", "k1", 0xb, false}, {"u1", "k2", 0xe, false}};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, third, 3, 5999, 9000, h) == STORE_OK);
    CHECK(!h[0] && h[1] && !h[2]);
    const claim_spec_t fourth[] = {{"u1", "k1", 0xa, false}};
    CHECK(claims_run(w, fourth, 1, 6000, 9000, h) == STORE_OK && h[0]); /* expired: replaced */
    CHECK(store_write_commit(w) == STORE_OK);

    /* the sweep: claims whose expiry is at or before now, a limit at a time; u2/k1 expires at 5000,
     * u1/k2 at 6000, u1/k1 (replaced) and u3/k1 at 9000 */
    size_t deleted = 99;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_claims_sweep(w, 4999, 10, &deleted) == STORE_OK && deleted == 0);
    CHECK(store_claims_sweep(w, 6000, 1, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_claims_sweep(w, 6000, 10, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_claims_sweep(w, 6000, 10, &deleted) == STORE_OK && deleted == 0);
    CHECK(store_write_commit(w) == STORE_OK);
    const claim_spec_t fifth[] = {{"u2", "k1", 0xc, false}, {"u1", "k1", 0xb, false}, {"u1", "k1", 0xa, true}};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, fifth, 3, 1, 9000, h) == STORE_OK && h[0] && !h[1] && h[2]);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK); /* released: nothing left to sweep of it */
    CHECK(store_claims_sweep(w, 10000, 10, &deleted) == STORE_OK && deleted == 2); /* u2/k1, u3/k1 */
    CHECK(store_write_commit(w) == STORE_OK);

    /* erasing a user takes their claims with their records, records first, within the limit */
    const claim_spec_t user5[] = {{"u5", "k1", 0xa, false}, {"u5", "k2", 0xa, false}, {"u50", "k1", 0xa, false}};
    store_idem_t rec = {.expires_ms = 9000, .status = 200, .body = SPAN_LIT("{}")};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, user5, 3, 1, 9000, h) == STORE_OK && h[0] && h[1] && h[2]);
    CHECK(store_idem_put(w, SPAN_LIT("u5"), SPAN_LIT("k1"), &rec) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_delete_user(w, SPAN_LIT("u5"), 2, &deleted) == STORE_OK && deleted == 2);
    store_idem_t got;
    CHECK(store_idem_get(w, SPAN_LIT("u5"), SPAN_LIT("k1"), &got) == STORE_NOTFOUND);
    CHECK(store_idem_delete_user(w, SPAN_LIT("u5"), 2, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_idem_delete_user(w, SPAN_LIT("u5"), 2, &deleted) == STORE_OK && deleted == 0);
    CHECK(store_write_commit(w) == STORE_OK);
    const claim_spec_t after[] = {{"u5", "k1", 0xb, false}, {"u5", "k2", 0xb, false}, {"u50", "k1", 0xb, false}};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, after, 3, 1, 9000, h) == STORE_OK && h[0] && h[1] && !h[2]); /* u50's kept */
    CHECK(store_write_commit(w) == STORE_OK);

    if (!store_shared(s))
        return;
    /* two nodes claim one key at once: the one that commits second finds the other's claim on retry */
    char err[256] = "";
    store_t *other = seam_open_kinds(t, "like,dislike", err);
    CHECK(other != NULL);
    if (!other)
        return;
    store_write_t *w2;
    const claim_spec_t mine[] = {{"u9", "k", 0x1, false}}, theirs[] = {{"u9", "k", 0x2, false}};
    bool h2[1];
    CHECK(store_write_begin(s, &w) == STORE_OK && store_write_begin(other, &w2) == STORE_OK);
    CHECK(claims_run(w, mine, 1, 1, 9000, h) == STORE_OK && h[0]);
    CHECK(claims_run(w2, theirs, 1, 1, 9000, h2) == STORE_OK && h2[0]);
    CHECK(store_write_commit(w2) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_RETRY);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(claims_run(w, mine, 1, 1, 9000, h) == STORE_OK && !h[0]);
    CHECK(store_write_commit(w) == STORE_OK);
    store_close(other);
}

typedef struct {
    const char *name;
    void (*run)(seam_t *t, store_t *s);
} seam_case_t;

static const seam_case_t cases[] = {
    {"open", case_open},     {"write", case_write}, {"counts", case_counts}, {"snapshots", case_snapshots},
    {"idem", case_idem},     {"aux", case_aux},     {"log", case_log},       {"lists", case_lists},
    {"export", case_export}, {"defer", case_defer}, {"errors", case_errors}, {"claims", case_claims},
};

static void run_cases(seam_t *t)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int before = unit_failed;
        t->store = seam_location(t) ? seam_open(t) : NULL;
        CHECK(t->store != NULL);
        if (t->store) {
            cases[i].run(t, t->store);
            store_close(t->store);
        }
        if (unit_failed != before)
            fprintf(stderr, "seam %s: case %s failed\n", t->name, cases[i].name);
    }
}

void test_seam(void)
{
    seam_t lmdb = {.name = "lmdb"};
    snprintf(lmdb.base, sizeof lmdb.base, "/tmp/tally-seam-XXXXXX");
    if (!mkdtemp(lmdb.base)) {
        CHECK(!"mkdtemp");
        return;
    }
    run_cases(&lmdb);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lmdb.base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", lmdb.base);

    const char *uri = getenv("TALLY_SEAM_PG");
    if (uri && *uri) {
        seam_t pg = {.name = "pg", .pg_uri = uri};
        run_cases(&pg);
    }
}
