/* test_store.c — what is the embedded (LMDB) store's own, on a temporary directory: its key order,
 * kinds added, schema upgrades, a full map, foreign directories, the journal and its epochs, and the
 * pipeline's fold on it. What every store promises is tested in test_seam.c, on both stores. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h> /* only to build a store of schema version 1 */

#include "core/journalrec.h"
#include "engine/pipeline.h"
#include "engine/recount.h"
#include "store/lmdb/lmdb.h"
#include "store/lmdb/lmdb_internal.h" /* the journal's guard: a change made behind its back */
#include "store/store.h"
#include "unit.h"

static void rm_dir(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static store_t *open_mode(const char *dir, const char *list, uint64_t map_size, reaction_mode_t mode)
{
    static kinds_t kinds; /* the store keeps no pointer to it, but tests reuse the codes */
    char err[256];
    store_t *s = NULL;
    kinds_parse(&kinds, list, err, sizeof err);
    kinds.mode = mode;
    /* no checkpoint of the journal during a test: which records follow the base is the test's choice
     * (an interval longer than any machine's uptime, so that a checkpoint that must start at once, the
     * missed-change guard's, is tested against a monotonic clock younger than the interval) */
    store_options_t opt = {.map_size_bytes = map_size, .checkpoint_interval_ms = 100ull * 365 * 24 * 3600 * 1000};
    if (store_open(dir, &kinds, &opt, &s, err, sizeof err) != STORE_OK)
        return NULL;
    return s;
}

static store_t *open_with(const char *dir, const char *list, uint64_t map_size)
{
    return open_mode(dir, list, map_size, REACTION_MODE_ONE);
}

/* Applies one transition the way the writer does: row, then log. */
static int apply_set(store_write_t *w, const char *item, const char *user, kindset_t to, uint64_t at_ms)
{
    reaction_row_t row;
    int rc = store_row_get(w, span_of(item), span_of(user), &row);
    if (rc != STORE_OK || row.set == to)
        return rc;
    reaction_row_t next = {to, row.version + 1};
    transition_t t = {span_of(item), span_of(user), row.set, to, next.version, at_ms, 0};
    uint64_t seq;
    rc = store_row_put(w, span_of(item), span_of(user), &next);
    return rc == STORE_OK ? store_log_append(w, &t, &seq) : rc;
}

static int apply(store_write_t *w, const char *item, const char *user, int to, uint64_t at_ms)
{
    return apply_set(w, item, user, kindset_of(to), at_ms);
}

static int collect_name(void *arg, span_t name)
{
    char *out = arg;
    strncat(out, name.ptr, name.len);
    strcat(out, ",");
    return 0;
}

/* A user's items come from the user's list, once the log is folded: only the items the user's
 * reaction is set on, however many items and users there are. */
typedef struct {
    size_t n, none;
    char last_item[ID_MAX_LEN + 1], last_user[ID_MAX_LEN + 1];
    bool ordered;
} page_seen_t;

static int page_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    page_seen_t *p = arg;
    char key[ID_MAX_LEN + 1];
    snprintf(key, sizeof key, "%.*s", (int)item.len, item.ptr);
    /* the embedded store's key order: the item's length first (its key is [len][item][user]) */
    int c = item.len != strlen(p->last_item) ? (item.len < strlen(p->last_item) ? -1 : 1) : strcmp(key, p->last_item);
    char u[ID_MAX_LEN + 1];
    snprintf(u, sizeof u, "%.*s", (int)user.len, user.ptr);
    if (p->n && (c < 0 || (c == 0 && strcmp(u, p->last_user) <= 0)))
        p->ordered = false;
    snprintf(p->last_item, sizeof p->last_item, "%s", key);
    snprintf(p->last_user, sizeof p->last_user, "%s", u);
    p->n++;
    p->none += row->set == KINDSET_EMPTY;
    return 0;
}

/* The export's pages: key order, each after the one before, from one snapshot that writes made after
 * it do not change. */
static void test_export_page(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
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
    CHECK(store_read_begin(s, &snap) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK); /* after the snapshot: not in the export */
    CHECK(apply(w, "i0", "late", 1, 2000) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    page_seen_t seen = {.ordered = true};
    size_t visited = 0, pages = 0;
    do {
        CHECK(store_export_page(snap, span_of(seen.last_item), span_of(seen.last_user), 7, page_row, &seen, &visited) ==
              STORE_OK);
        pages++;
    } while (visited == 7 && pages < 100);
    CHECK(seen.n == 250 && seen.none == 25 && seen.ordered);
    CHECK(pages == 36); /* 250 rows, 7 a page: 35 full and one short */
    store_read_end(snap);
    store_close(s);
}

static void test_user_items(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    const char *items[] = {"a", "ab", "b", "b0", "c", "zz"};
    char user[32];
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        for (int u = 0; u < 50; u++) {
            snprintf(user, sizeof user, "u%d", u);
            if (!(u == 7 && (i == 1 || i == 4))) /* u7 has no row on ab and c */
                CHECK(apply(w, items[i], user, 1, 1000) == STORE_OK);
        }
    }
    CHECK(apply(w, "b", "u7", KIND_NONE, 1000) == STORE_OK); /* a row at none is not listed */
    CHECK(apply(w, "b", "u70", 1, 1000) == STORE_OK);        /* u7's prefix, another user */
    CHECK(apply(w, "b", "u", 1, 1000) == STORE_OK);
    pipeline_result_t res;
    CHECK(pipeline_fold(w, 1u << 20, &res) == STORE_OK && !res.more);
    char out[256] = "", last[ID_MAX_LEN];
    size_t visited, last_len;
    CHECK(store_user_items(w, SPAN_LIT("u7"), (span_t){0}, 100, collect_name, out, &visited, last, &last_len) ==
          STORE_OK);
    CHECK(strcmp(out, "a,b0,zz,") == 0 && visited == 3 && last_len == 0); /* in the order they were set */
    out[0] = '\0';
    CHECK(store_user_items(w, SPAN_LIT("u7"), (span_t){0}, 2, collect_name, out, &visited, last, &last_len) ==
          STORE_OK);
    CHECK(strcmp(out, "a,b0,") == 0 && visited == 2);
    out[0] = '\0';
    CHECK(store_user_items(w, SPAN_LIT("nobody"), (span_t){0}, 100, collect_name, out, &visited, last, &last_len) ==
          STORE_OK);
    CHECK(out[0] == '\0' && visited == 0);
    CHECK(store_write_commit(w) == STORE_OK);
    store_close(s);
}

/* The store's LMDB environment opened directly, to write what an older version left. */
static MDB_env *raw_env(const char *dir, unsigned flags)
{
    MDB_env *env;
    if (mdb_env_create(&env) != 0)
        return NULL;
    if (mdb_env_set_maxdbs(env, 12) != 0 || mdb_env_set_mapsize(env, 1ull << 30) != 0 ||
        mdb_env_open(env, dir, flags, 0640) != 0) {
        mdb_env_close(env);
        return NULL;
    }
    return env;
}

static int list_collect(void *arg, span_t name, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    (void)seq, (void)at_ms, (void)set;
    return collect_name(arg, name);
}

/* True when the list of key (an item, or a user when by_user) under kind holds want ("a,b,"), newest
 * first. Opens the store at dir. */
static bool list_names(const char *dir, bool by_user, const char *key, int kind, const char *want)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    store_read_t *r;
    char out[512] = "";
    bool ok = s && store_read_begin(s, &r) == STORE_OK;
    if (ok) {
        store_list_query_t q = {.by_user = by_user, .key = span_of(key), .kind = kind, .limit = 100};
        ok = store_read_list(r, &q, list_collect, out) == STORE_OK && strcmp(out, want) == 0;
        if (!ok)
            fprintf(stderr, "list %s: got %s, want %s\n", key, out, want);
        store_read_end(r);
    }
    store_close(s);
    return ok;
}

/* A store of schema version 1 (with its user index) opens as version 4, the index dropped, rows kept
 * and the lists built; one of version 2 gets its lists built; one of version 3 has its user index
 * moved from luser into idem (entries and positions kept) and its stale expiry entries dropped. */
static void test_schema_upgrade(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "i1", "u1", 1, 1000) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    store_close(s);

    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, uidx;
    CHECK((env = raw_env(dir, 0)) != NULL);
    if (!env)
        return;
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "meta", 0, &meta) == 0 &&
          mdb_dbi_open(txn, "user_items", MDB_CREATE, &uidx) == 0);
    MDB_val k = {6, "schema"}, v = {1, "1"}, uk = {5, "\x02u1i1"}, uv = {0, NULL};
    CHECK(mdb_put(txn, meta, &k, &v, 0) == 0 && mdb_put(txn, uidx, &uk, &uv, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);

    s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_read_t *r;
    reaction_row_t row;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_row(r, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == kindset_of(1) &&
          row.version == 1);
    store_read_end(r);
    store_close(s);
    CHECK((env = raw_env(dir, MDB_RDONLY)) != NULL);
    if (!env)
        return;
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 && mdb_dbi_open(txn, "meta", 0, &meta) == 0);
    CHECK(mdb_get(txn, meta, &k, &v) == 0 && v.mv_size == 1 && memcmp(v.mv_data, "4", 1) == 0);
    CHECK(mdb_dbi_open(txn, "user_items", 0, &uidx) == MDB_NOTFOUND);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    CHECK(list_names(dir, false, "i1", KIND_NONE, "u1,")); /* the lists were built from the rows */

    /* version 2 had no lists: opening one builds them */
    MDB_dbi litem, luser, idem, idem_exp;
    CHECK((env = raw_env(dir, 0)) != NULL);
    if (!env)
        return;
    MDB_val v2 = {1, "2"};
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "meta", 0, &meta) == 0 &&
          mdb_dbi_open(txn, "litem", 0, &litem) == 0 && mdb_drop(txn, litem, 1) == 0 &&
          mdb_put(txn, meta, &k, &v2, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    CHECK(list_names(dir, false, "i1", KIND_NONE, "u1,"));
    CHECK(list_names(dir, true, "u1", 1, "i1,"));

    /* version 3: the user index in luser, without the tag; a live record (its expiry entry stays) and an
     * expiry entry whose record is gone (it goes) */
    store_idem_t live = {.expires_ms = 1u << 30, .status = 200, .body = SPAN_LIT("{}")};
    CHECK((s = open_with(dir, "like,dislike", 1ull << 30)) != NULL);
    if (!s)
        return;
    CHECK(store_write_begin(s, &w) == STORE_OK && store_idem_put(w, SPAN_LIT("u1"), SPAN_LIT("k"), &live) == STORE_OK &&
          store_write_commit(w) == STORE_OK);
    store_close(s);
    CHECK((env = raw_env(dir, 0)) != NULL);
    if (!env)
        return;
    MDB_val v3old = {1, "3"}, ik, iv;
    uint8_t moved[64], orig[64], value[64];
    size_t moved_len = 0;
    MDB_cursor *cur;
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "meta", 0, &meta) == 0 &&
          mdb_dbi_open(txn, "idem", 0, &idem) == 0 && mdb_dbi_open(txn, "idem_exp", 0, &idem_exp) == 0 &&
          mdb_dbi_open(txn, "luser", MDB_CREATE, &luser) == 0 && mdb_cursor_open(txn, idem, &cur) == 0);
    CHECK(mdb_cursor_get(cur, &ik, &iv, MDB_FIRST) == 0 && ik.mv_size == 15 &&
          memcmp(ik.mv_data, "\x02u1\x00", 4) == 0); /* [2]u1 [tag] [d] [seq BE] i1 */
    if (ik.mv_size == 15 && iv.mv_size <= sizeof value) {
        memcpy(orig, ik.mv_data, ik.mv_size);
        memcpy(value, iv.mv_data, iv.mv_size);
        moved_len = ik.mv_size - 1;
        memcpy(moved, ik.mv_data, 3);
        memcpy(moved + 3, (const uint8_t *)ik.mv_data + 4, ik.mv_size - 4);
    }
    MDB_val lk = {moved_len, moved}, lv = iv, ek = {12, "\0\0\0\0\0\0\0\1\x02u1k"}, ev = {0, NULL};
    CHECK(mdb_put(txn, luser, &lk, &lv, 0) == 0 && mdb_cursor_del(cur, 0) == 0);
    mdb_cursor_close(cur);
    CHECK(mdb_put(txn, idem_exp, &ek, &ev, 0) == 0 && mdb_put(txn, meta, &k, &v3old, 0) == 0 &&
          mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    CHECK(list_names(dir, true, "u1", 1, "i1,"));
    CHECK(list_names(dir, true, "u1", KIND_NONE, "i1,"));
    CHECK((env = raw_env(dir, MDB_RDONLY)) != NULL);
    if (!env)
        return;
    MDB_stat st;
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 && mdb_dbi_open(txn, "meta", 0, &meta) == 0 &&
          mdb_dbi_open(txn, "idem", 0, &idem) == 0 && mdb_dbi_open(txn, "idem_exp", 0, &idem_exp) == 0);
    CHECK(mdb_get(txn, meta, &k, &v) == 0 && v.mv_size == 1 && memcmp(v.mv_data, "4", 1) == 0);
    CHECK(mdb_dbi_open(txn, "luser", 0, &luser) == MDB_NOTFOUND);
    CHECK(mdb_stat(txn, idem_exp, &st) == 0 && st.ms_entries == 1); /* the live record's; the stale one went */
    CHECK(mdb_stat(txn, idem, &st) == 0 && st.ms_entries == 2);     /* the record and the list entry, moved */
    ik = (MDB_val){moved_len + 1, orig};
    CHECK(moved_len && mdb_get(txn, idem, &ik, &iv) == 0 && iv.mv_size == lv.mv_size &&
          memcmp(iv.mv_data, value, iv.mv_size) == 0);
    mdb_txn_abort(txn);
    mdb_env_close(env);

    /* a version this build does not know is refused, and left as it is */
    CHECK((env = raw_env(dir, 0)) != NULL);
    if (!env)
        return;
    MDB_val v3 = {1, "5"};
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "meta", 0, &meta) == 0 &&
          mdb_put(txn, meta, &k, &v3, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    CHECK(open_with(dir, "like,dislike", 1ull << 30) == NULL);
}

static void test_rows_log_fold(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    char user[32];
    for (int i = 0; i < 10000; i++) { /* a viral item: 10 000 likes */
        snprintf(user, sizeof user, "u%d", i);
        CHECK(apply(w, "viral", user, 1, 1000) == STORE_OK);
    }
    CHECK(apply(w, "other", "u1", 2, 1000) == STORE_OK);
    CHECK(apply(w, "other", "u1", KIND_NONE, 1000) == STORE_OK); /* net zero within the fold */
    pipeline_result_t res;
    CHECK(pipeline_fold(w, 100000, &res) == STORE_OK);
    CHECK(res.folded == 10002 && !res.more);
    CHECK(res.items == 1); /* 10 000 transitions of one item: one counts update; the net-zero item none */
    CHECK(store_write_commit(w) == STORE_OK);

    store_read_t *r;
    int64_t counts[KINDS_MAX + 1];
    reaction_row_t row;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("viral"), counts) == STORE_OK && counts[1] == 10000 && counts[2] == 0);
    CHECK(store_read_counts(r, SPAN_LIT("other"), counts) == STORE_OK && counts[1] == 0 && counts[2] == 0);
    CHECK(store_read_row(r, SPAN_LIT("other"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == KINDSET_EMPTY &&
          row.version == 2);
    CHECK(store_read_row(r, SPAN_LIT("nothing"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 0);
    store_read_end(r);

    /* A fold with a limit leaves the rest, reports its age, and a second fold finishes. */
    CHECK(store_write_begin(s, &w) == STORE_OK);
    for (int i = 0; i < 10; i++) {
        snprintf(user, sizeof user, "u%d", i);
        CHECK(apply(w, "viral", user, 2, 2000 + (uint64_t)i) == STORE_OK);
    }
    CHECK(pipeline_fold(w, 4, &res) == STORE_OK && res.folded == 4 && res.more && res.oldest_unfolded_ms == 2004);
    CHECK(store_write_commit(w) == STORE_OK);
    /* An aborted transaction leaves nothing behind, not even its sequence numbers. */
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "viral", "ghost", 1, 3000) == STORE_OK);
    store_write_abort(w);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(pipeline_fold(w, 100, &res) == STORE_OK && res.folded == 6 && !res.more);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("viral"), counts) == STORE_OK && counts[1] == 9990 && counts[2] == 10);
    CHECK(store_read_row(r, SPAN_LIT("viral"), SPAN_LIT("ghost"), &row) == STORE_OK && row.version == 0);
    store_read_end(r);
    store_close(s);

    /* Kinds: removing one refuses; adding one keeps the old counts under the old names. */
    CHECK(open_with(dir, "like", 1ull << 30) == NULL);
    s = open_with(dir, "love,dislike,like", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("viral"), counts) == STORE_OK && counts[3] == 9990 && counts[2] == 10 &&
          counts[1] == 0);
    CHECK(store_read_row(r, SPAN_LIT("viral"), SPAN_LIT("u0"), &row) == STORE_OK && row.set == kindset_of(2));
    store_read_end(r);
    store_close(s);
}

static int collect_uncounted(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "%.*s:%u,", (int)t->user.len, t->user.ptr, (unsigned)t->uncounted);
    return 0;
}

/* A voided user: the flag record read by store_user_voided and by the recount's tally, log entries
 * keeping their counted bits, and the fold moving the counts by them. */
static void test_voided(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    bool voided = true;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "i", "bot", 1, 1000) == STORE_OK);
    CHECK(apply(w, "i", "bo", 1, 1000) == STORE_OK);
    CHECK(store_user_voided(w, SPAN_LIT("bot"), &voided) == STORE_OK && !voided);
    CHECK(store_aux_put(w, SPAN_LIT(STORE_VOID_PREFIX "bot"), SPAN_LIT("1")) == STORE_OK);
    CHECK(store_user_voided(w, SPAN_LIT("bot"), &voided) == STORE_OK && voided); /* its own put, at once */
    CHECK(store_user_voided(w, SPAN_LIT("bo"), &voided) == STORE_OK && !voided); /* a prefix is not the user */
    transition_t t = {SPAN_LIT("i"), SPAN_LIT("bot"),           kindset_of(1), kindset_of(1), 1,
                      1000,          TRANSITION_UNCOUNTED_AFTER};
    uint64_t seq;
    CHECK(store_log_append(w, &t, &seq) == STORE_OK);
    pipeline_result_t res;
    CHECK(pipeline_fold(w, 100, &res) == STORE_OK && res.folded == 3);
    CHECK(store_write_commit(w) == STORE_OK);
    store_read_t *r;
    int64_t counts[KINDS_MAX + 1], tally[KINDS_MAX + 1];
    char seen[256] = "";
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("i"), counts) == STORE_OK && counts[1] == 1);
    CHECK(store_read_tally_items(r, &SPAN_LIT("i"), 1, &tally) == STORE_OK && tally[1] == 1 && tally[0] == 1);
    CHECK(store_read_log(r, 0, 10, collect_uncounted, seen) == STORE_OK);
    CHECK(strcmp(seen, "bot:0,bo:0,bot:2,") == 0);
    store_read_end(r);
    store_close(s);
}

/* A store that runs out of space fails the transaction cleanly and keeps what was committed. */
static void test_full(const char *dir)
{
    store_t *s = open_with(dir, "like", 1ull << 24);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "kept", "u", 1, 1) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    int rc = STORE_OK;
    char user[64];
    for (int i = 0; i < 1000000 && rc == STORE_OK; i++) {
        snprintf(user, sizeof user, "user-with-a-long-name-%d", i);
        rc = apply(w, "filler", user, 1, 1);
    }
    CHECK(rc == STORE_FULL);
    store_write_abort(w);
    store_read_t *r;
    reaction_row_t row;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_row(r, SPAN_LIT("kept"), SPAN_LIT("u"), &row) == STORE_OK && row.version == 1);
    CHECK(store_read_row(r, SPAN_LIT("filler"), SPAN_LIT("user-with-a-long-name-1"), &row) == STORE_OK &&
          row.version == 0);
    store_read_end(r);
    store_close(s);
}

/* Recount compares rows with counts plus the log not yet folded. When the log cannot be summed (here
 * an item id longer than the item map takes, as if memory ran out), the recount fails; it must not
 * compare against the part it summed and report drift that is not there. */
static void test_recount_unsummable_log(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    char long_item[ID_MAX_LEN + 20];
    memset(long_item, 'L', sizeof long_item - 1);
    long_item[sizeof long_item - 1] = '\0';
    store_write_t *w;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "i1", "u1", 1, 1000) == STORE_OK);
    CHECK(apply(w, long_item, "u1", 1, 1001) == STORE_OK);
    CHECK(apply(w, "i1", "u2", 1, 1002) == STORE_OK); /* after the entry that cannot be summed */
    CHECK(store_write_commit(w) == STORE_OK);         /* nothing folded: counts are 0, the log holds 3 */
    span_t items[] = {SPAN_LIT("i1")};
    recount_report_t rep;
    CHECK(recount_run(s, NULL, items, 1, &rep) == STORE_ERROR);
    CHECK(rep.ndrift == 0);
    recount_report_free(&rep);
    store_close(s);
}

/* Counts on the disk that the program did not write (a record of a wrong size, a fold that would
 * leave a count negative) are STORE_ERROR with the transaction void, not an abort. */
static void test_corrupt_counts(const char *dir)
{
    store_t *s = open_with(dir, "like,dislike", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    int64_t deltas[KINDS_MAX + 1] = {0}, counts[KINDS_MAX + 1];
    deltas[1] = 2;
    CHECK(store_write_begin(s, &w) == STORE_OK && store_counts_add(w, SPAN_LIT("i"), deltas) == STORE_OK &&
          store_write_commit(w) == STORE_OK);
    deltas[1] = -3; /* 2 - 3 */
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_counts_add(w, SPAN_LIT("i"), deltas) == STORE_ERROR);
    store_write_abort(w);
    deltas[1] = INT64_MAX; /* an overflow is no count either */
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_counts_add(w, SPAN_LIT("i"), deltas) == STORE_ERROR);
    store_write_abort(w);
    store_read_t *r;
    CHECK(store_read_begin(s, &r) == STORE_OK && store_read_counts(r, SPAN_LIT("i"), counts) == STORE_OK &&
          counts[1] == 2);
    store_read_end(r);
    store_close(s);

    MDB_env *env = raw_env(dir, 0);
    MDB_txn *txn;
    MDB_dbi dbi;
    CHECK(env != NULL);
    if (!env)
        return;
    MDB_val k = {2, "\x01j"}, v = {5, "12345"}; /* the counts record of item "j", 5 bytes */
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "counts", 0, &dbi) == 0 &&
          mdb_put(txn, dbi, &k, &v, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    CHECK((s = open_with(dir, "like,dislike", 1ull << 30)) != NULL);
    if (!s)
        return;
    CHECK(store_read_begin(s, &r) == STORE_OK && store_read_counts(r, SPAN_LIT("j"), counts) == STORE_ERROR);
    store_read_end(r);
    deltas[1] = 1;
    CHECK(store_write_begin(s, &w) == STORE_OK && store_counts_add(w, SPAN_LIT("j"), deltas) == STORE_ERROR);
    store_write_abort(w);
    store_close(s);
}

static bool file_exists(const char *dir, const char *name)
{
    char path[700];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

static void file_put(const char *dir, const char *name, const char *text, size_t len)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(text, 1, len, f) == len);
        fclose(f);
    }
}

/* The whole file, or NULL; *len its size. */
static char *file_get(const char *dir, const char *name, size_t *len)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    char *buf = malloc(1 << 16);
    *len = f && buf ? fread(buf, 1, 1 << 16, f) : 0;
    if (f)
        fclose(f);
    return buf;
}

/* --data only opens an empty directory or a tally store: another program's LMDB environment, a
 * garbage data.mdb, or a directory of other files is refused before anything is written into it;
 * a store of an earlier version (no marker) still opens, and gets its marker. */
static void test_foreign_dirs(const char *base)
{
    char dir[600];
    /* another program's LMDB environment: no tally tables appear in it */
    snprintf(dir, sizeof dir, "%s/foreign-env", base);
    mkdir(dir, 0750);
    MDB_env *env = raw_env(dir, 0);
    MDB_txn *txn;
    MDB_dbi dbi;
    CHECK(env != NULL);
    if (!env)
        return;
    MDB_val k = {3, "key"}, v = {5, "value"};
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "theirs", MDB_CREATE, &dbi) == 0 &&
          mdb_put(txn, dbi, &k, &v, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    size_t before_len, after_len;
    char *before = file_get(dir, "data.mdb", &before_len);
    CHECK(open_with(dir, "like", 1ull << 30) == NULL);
    char *after = file_get(dir, "data.mdb", &after_len);
    CHECK(before_len > 0 && before_len == after_len && memcmp(before, after, before_len) == 0);
    free(before);
    free(after);
    CHECK(!file_exists(dir, "TALLY_STORE") && !file_exists(dir, "tallyd.lock"));
    CHECK((env = raw_env(dir, MDB_RDONLY)) != NULL);
    if (env) {
        CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0);
        CHECK(mdb_dbi_open(txn, "meta", 0, &dbi) == MDB_NOTFOUND && mdb_dbi_open(txn, "rows", 0, &dbi) == MDB_NOTFOUND);
        mdb_txn_abort(txn);
        mdb_env_close(env);
    }
    char err[512] = "";
    CHECK(lmdb_lock_dir(dir, err, sizeof err) >= 0 && !file_exists(dir, "tallyd.lock")); /* the lock writes nothing */

    /* a data.mdb that is not LMDB: it and lock.mdb keep their bytes */
    snprintf(dir, sizeof dir, "%s/garbage", base);
    mkdir(dir, 0750);
    char junk[8192];
    memset(junk, 'x', sizeof junk);
    file_put(dir, "data.mdb", junk, sizeof junk);
    memset(junk, 'y', sizeof junk);
    file_put(dir, "lock.mdb", junk, 100);
    CHECK(open_with(dir, "like", 1ull << 30) == NULL);
    char *data = file_get(dir, "data.mdb", &after_len), *lock;
    CHECK(after_len == sizeof junk && data[0] == 'x' && data[sizeof junk - 1] == 'x');
    free(data);
    lock = file_get(dir, "lock.mdb", &after_len);
    CHECK(after_len == 100 && memcmp(lock, junk, 100) == 0);
    free(lock);
    CHECK(!file_exists(dir, "TALLY_STORE"));

    /* other files and no marker */
    snprintf(dir, sizeof dir, "%s/other-files", base);
    mkdir(dir, 0750);
    file_put(dir, "notes.txt", "mine", 4);
    CHECK(open_with(dir, "like", 1ull << 30) == NULL);
    CHECK(!file_exists(dir, "TALLY_STORE") && !file_exists(dir, "data.mdb") && !file_exists(dir, "lock.mdb"));
    store_options_t opt = {.map_size_bytes = 1ull << 30};
    store_t *s = NULL;
    kinds_t kinds;
    kinds_parse(&kinds, "like", err, sizeof err);
    CHECK(store_open(dir, &kinds, &opt, &s, err, sizeof err) != STORE_OK && strstr(err, "notes.txt") &&
          strstr(err, "not a tally store"));

    /* a marker of another format */
    snprintf(dir, sizeof dir, "%s/other-format", base);
    mkdir(dir, 0750);
    file_put(dir, "TALLY_STORE", "tally store: lmdb, format 9\n", 28);
    CHECK(open_with(dir, "like", 1ull << 30) == NULL && !file_exists(dir, "data.mdb"));

    /* an empty directory gets its marker; a store of an earlier version (no marker, a tallyd.lock) opens */
    snprintf(dir, sizeof dir, "%s/legacy", base);
    mkdir(dir, 0750);
    CHECK((s = open_with(dir, "like", 1ull << 30)) != NULL);
    store_close(s);
    CHECK(file_exists(dir, "TALLY_STORE"));
    char path[700];
    snprintf(path, sizeof path, "%s/TALLY_STORE", dir);
    CHECK(unlink(path) == 0);
    file_put(dir, "tallyd.lock", "", 0);
    CHECK((s = open_with(dir, "like", 1ull << 30)) != NULL);
    store_close(s);
    CHECK(file_exists(dir, "TALLY_STORE"));
    file_put(dir, "TALLY_STORE", "", 0); /* a crash while the marker was written */
    CHECK((s = open_with(dir, "like", 1ull << 30)) != NULL);
    store_close(s);
}

typedef struct {
    kindset_t from[8], to[8];
    size_t n;
} seen_log_t;

static int seen_one(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    seen_log_t *l = arg;
    if (l->n < 8) {
        l->from[l->n] = t->from;
        l->to[l->n] = t->to;
    }
    l->n++;
    return 0;
}

/* Many mode: rows and transitions holding several kinds keep them; the reactors are folded and
 * recounted; one mode's store reopens in many with its reactors counted, and not back while a user
 * holds two kinds. */
static void test_sets(const char *dir)
{
    kindset_t like = kindset_of(1), dislike = kindset_of(2), love = kindset_of(3);
    store_t *s = open_with(dir, "like,dislike,love", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    pipeline_result_t res;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply(w, "p", "u1", 1, 1) == STORE_OK && apply(w, "p", "u2", 2, 1) == STORE_OK);
    CHECK(pipeline_fold(w, 100, &res) == STORE_OK && store_write_commit(w) == STORE_OK);
    store_read_t *r;
    int64_t counts[KINDS_MAX + 1];
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("p"), counts) == STORE_OK && counts[0] == 2 && counts[1] == 1);
    store_read_end(r);
    store_close(s);

    CHECK((s = open_mode(dir, "like,dislike,love", 1ull << 30, REACTION_MODE_MANY)) != NULL);
    if (!s)
        return;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply_set(w, "p", "u1", like | love, 2) == STORE_OK);           /* {like} → {like, love} */
    CHECK(apply_set(w, "p", "u3", like | dislike | love, 3) == STORE_OK); /* {} → all three */
    CHECK(apply_set(w, "p", "u2", KINDSET_EMPTY, 4) == STORE_OK);         /* {dislike} → {} */
    CHECK(pipeline_fold(w, 100, &res) == STORE_OK && store_write_commit(w) == STORE_OK);
    reaction_row_t row;
    seen_log_t log = {0};
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("p"), counts) == STORE_OK && counts[0] == 2 && counts[1] == 2 &&
          counts[2] == 1 && counts[3] == 2);
    CHECK(store_read_tally_items(r, &SPAN_LIT("p"), 1, &counts) == STORE_OK && counts[0] == 2 && counts[1] == 2 &&
          counts[2] == 1 && counts[3] == 2);
    CHECK(store_read_row(r, SPAN_LIT("p"), SPAN_LIT("u1"), &row) == STORE_OK && row.set == (like | love) &&
          row.version == 2);
    CHECK(store_read_log(r, 2, 100, seen_one, &log) == STORE_OK && log.n == 3);
    CHECK(log.from[0] == like && log.to[0] == (like | love) && log.to[1] == (like | dislike | love) &&
          log.from[2] == dislike && log.to[2] == KINDSET_EMPTY);
    store_read_end(r);
    recount_report_t rep;
    CHECK(recount_run(s, NULL, NULL, 0, &rep) == STORE_OK && rep.ndrift == 0 && rep.checked == 1);
    recount_report_free(&rep);
    store_close(s);

    /* Back to one mode: refused while u1 and u3 hold several kinds. */
    CHECK(open_with(dir, "like,dislike,love", 1ull << 30) == NULL);
    CHECK((s = open_mode(dir, "like,dislike,love", 1ull << 30, REACTION_MODE_MANY)) != NULL);
    if (!s)
        return;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply_set(w, "p", "u1", love, 5) == STORE_OK && apply_set(w, "p", "u3", KINDSET_EMPTY, 6) == STORE_OK);
    CHECK(pipeline_fold(w, 100, &res) == STORE_OK && store_write_commit(w) == STORE_OK);
    store_close(s);
    CHECK((s = open_with(dir, "like,dislike,love", 1ull << 30)) != NULL); /* nobody holds two now */
    if (!s)
        return;
    CHECK(store_read_begin(s, &r) == STORE_OK);
    CHECK(store_read_counts(r, SPAN_LIT("p"), counts) == STORE_OK && counts[0] == 1 && counts[1] == 0 &&
          counts[3] == 1);
    store_read_end(r);
    store_close(s);
}

typedef struct {
    char names[512];
    uint64_t seq[16], at[16];
    kindset_t set[16];
    size_t n;
} page_t;

static int page_collect(void *arg, span_t name, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    page_t *p = arg;
    if (p->n < 16) {
        p->seq[p->n] = seq;
        p->at[p->n] = at_ms;
        p->set[p->n] = set;
    }
    p->n++;
    return collect_name(p->names, name);
}

static page_t page_of(store_t *s, bool by_user, const char *key, int kind, bool has_cursor, uint64_t seq,
                      const char *name, size_t limit)
{
    page_t p = {0};
    store_read_t *r;
    store_list_query_t q = {.by_user = by_user,
                            .key = span_of(key),
                            .kind = kind,
                            .limit = limit,
                            .has_cursor = has_cursor,
                            .seq = seq,
                            .name = span_of(name ? name : "")};
    if (store_read_begin(s, &r) != STORE_OK)
        return p;
    if (store_read_list(r, &q, page_collect, &p) != STORE_OK)
        strcpy(p.names, "error");
    store_read_end(r);
    return p;
}

static kindset_t expect_row(void *arg, span_t item, span_t user, kindset_t row_set)
{
    (void)arg, (void)item, (void)user;
    return row_set;
}

static uint64_t check_item_lists(store_t *s, const char *item)
{
    store_read_t *r;
    uint64_t n = UINT64_MAX;
    if (store_read_begin(s, &r) == STORE_OK) {
        if (store_read_lists_check(r, &(span_t){item, strlen(item)}, 1, expect_row, NULL, &n) != STORE_OK)
            n = UINT64_MAX;
        store_read_end(r);
    }
    return n;
}

/* The lists as the fold keeps them (many mode: a kind's position is where it joined), pages and
 * cursors, the check (which must find damage), a rebuild, and recount's view of the unfolded log. */
static int count_idem(void *arg, span_t user, span_t key, const store_idem_t *rec)
{
    (void)user, (void)key, (void)rec;
    (*(size_t *)arg)++;
    return 0;
}

static void test_lists(const char *dir)
{
    store_t *s = open_mode(dir, "like,love,laugh", 1ull << 30, REACTION_MODE_MANY);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    pipeline_result_t res;
    kindset_t like = kindset_of(1), love = kindset_of(2);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(apply_set(w, "i1", "u1", like, 1001) == STORE_OK);          /* seq 1 */
    CHECK(apply_set(w, "i1", "u2", love, 1002) == STORE_OK);          /* 2 */
    CHECK(apply_set(w, "i1", "u3", like, 1003) == STORE_OK);          /* 3 */
    CHECK(apply_set(w, "i1", "u1", like | love, 1004) == STORE_OK);   /* 4: love joins, like stays at 1 */
    CHECK(apply_set(w, "i1", "u2", KINDSET_EMPTY, 1005) == STORE_OK); /* 5 */
    CHECK(apply_set(w, "i2", "u1", love, 1006) == STORE_OK);          /* 6 */
    CHECK(pipeline_fold(w, 1u << 20, &res) == STORE_OK && res.folded == 6);
    CHECK(store_write_commit(w) == STORE_OK);

    page_t p = page_of(s, false, "i1", KIND_NONE, false, 0, NULL, 10);
    CHECK(strcmp(p.names, "u1,u3,") == 0 && p.seq[0] == 4 && p.at[0] == 1004 && p.set[0] == (like | love));
    p = page_of(s, false, "i1", 1, false, 0, NULL, 10);
    CHECK(strcmp(p.names, "u3,u1,") == 0 && p.seq[1] == 1 && p.at[1] == 1001 && p.set[1] == (like | love));
    p = page_of(s, false, "i1", 2, false, 0, NULL, 10);
    CHECK(strcmp(p.names, "u1,") == 0 && p.seq[0] == 4);
    CHECK(strcmp(page_of(s, false, "i1", 3, false, 0, NULL, 10).names, "") == 0);
    p = page_of(s, false, "i1", KIND_NONE, false, 0, NULL, 1);
    CHECK(strcmp(p.names, "u1,") == 0);
    p = page_of(s, false, "i1", KIND_NONE, true, p.seq[0], "u1", 1); /* strictly after the cursor */
    CHECK(strcmp(p.names, "u3,") == 0);
    CHECK(strcmp(page_of(s, false, "i1", KIND_NONE, true, 3, "u3", 10).names, "") == 0);
    CHECK(strcmp(page_of(s, true, "u1", KIND_NONE, false, 0, NULL, 10).names, "i2,i1,") == 0);
    CHECK(strcmp(page_of(s, true, "u1", 1, false, 0, NULL, 10).names, "i1,") == 0);
    CHECK(strcmp(page_of(s, true, "u2", KIND_NONE, false, 0, NULL, 10).names, "") == 0);
    CHECK(strcmp(page_of(s, false, "i", KIND_NONE, false, 0, NULL, 10).names, "") == 0); /* not a prefix match */

    CHECK(check_item_lists(s, "i1") == 0 && check_item_lists(s, "i2") == 0 && check_item_lists(s, "") == 0);
    /* damage: an entry without its row is found, and so is a row whose entry went */
    list_change_t c;
    list_change_init(&c);
    list_change_add(&c, KINDSET_EMPTY, like, 99, 9999);
    CHECK(store_write_begin(s, &w) == STORE_OK &&
          store_list_apply(w, SPAN_LIT("i1"), SPAN_LIT("ghost"), &c) == STORE_OK && store_write_commit(w) == STORE_OK);
    CHECK(check_item_lists(s, "i1") > 0 && check_item_lists(s, "i2") == 0);
    list_change_init(&c);
    list_change_add(&c, like, KINDSET_EMPTY, 100, 9999);
    CHECK(store_write_begin(s, &w) == STORE_OK &&
          store_list_apply(w, SPAN_LIT("i1"), SPAN_LIT("ghost"), &c) == STORE_OK &&
          store_list_apply(w, SPAN_LIT("i1"), SPAN_LIT("u3"), &c) == STORE_OK && store_write_commit(w) == STORE_OK);
    CHECK(check_item_lists(s, "i1") > 0);

    /* a rebuild from the rows and the (whole) log gives the lists the fold kept */
    CHECK(store_write_begin(s, &w) == STORE_OK && store_lists_rebuild(w) == STORE_OK &&
          store_write_commit(w) == STORE_OK);
    CHECK(check_item_lists(s, "i1") == 0 && check_item_lists(s, "") == 0);
    p = page_of(s, false, "i1", 1, false, 0, NULL, 10);
    CHECK(strcmp(p.names, "u3,u1,") == 0 && p.seq[0] == 3 && p.seq[1] == 1 && p.at[1] == 1001);
    CHECK(strcmp(page_of(s, false, "i1", KIND_NONE, false, 0, NULL, 10).names, "u1,u3,") == 0);

    /* the log after the checkpoint: the lists lag the rows, and recount knows it (no mismatch) */
    CHECK(store_write_begin(s, &w) == STORE_OK && apply_set(w, "i1", "u3", KINDSET_EMPTY, 1010) == STORE_OK &&
          apply_set(w, "i1", "u4", love, 1011) == STORE_OK && store_write_commit(w) == STORE_OK);
    CHECK(check_item_lists(s, "i1") > 0);
    recount_report_t rep;
    CHECK(recount_run(s, NULL, NULL, 0, &rep) == STORE_OK && rep.list_mismatches == 0 && rep.checked == 2);
    recount_report_free(&rep);
    CHECK(store_write_begin(s, &w) == STORE_OK && pipeline_fold(w, 1u << 20, &res) == STORE_OK &&
          store_write_commit(w) == STORE_OK);
    CHECK(check_item_lists(s, "i1") == 0);
    CHECK(strcmp(page_of(s, false, "i1", KIND_NONE, false, 0, NULL, 10).names, "u4,u1,") == 0);

    /* the user index shares idem with the user's records: neither walk sees the other's keys */
    store_idem_t rec = {.expires_ms = 1u << 30, .status = 200, .body = SPAN_LIT("{}")};
    size_t deleted = 0, seen = 0;
    store_stats_t st;
    CHECK(store_write_begin(s, &w) == STORE_OK && store_idem_put(w, SPAN_LIT("u1"), SPAN_LIT("k1"), &rec) == STORE_OK &&
          store_idem_put(w, SPAN_LIT("u1"), SPAN_LIT("~"), &rec) == STORE_OK && store_write_commit(w) == STORE_OK);
    CHECK(store_stats(s, &st) == STORE_OK && st.idem_records == 2);
    store_read_t *r;
    CHECK(store_read_begin(s, &r) == STORE_OK && store_read_idem(r, count_idem, &seen) == STORE_OK && seen == 2);
    store_read_end(r);
    CHECK(check_item_lists(s, "") == 0);
    CHECK(store_write_begin(s, &w) == STORE_OK &&
          store_idem_delete_user(w, SPAN_LIT("u1"), 100, &deleted) == STORE_OK && store_write_commit(w) == STORE_OK);
    CHECK(deleted == 2 && store_stats(s, &st) == STORE_OK && st.idem_records == 0);
    CHECK(strcmp(page_of(s, true, "u1", KIND_NONE, false, 0, NULL, 10).names, "i2,i1,") == 0);
    CHECK(check_item_lists(s, "") == 0);
    CHECK(store_write_begin(s, &w) == STORE_OK && store_idem_put(w, SPAN_LIT("u1"), SPAN_LIT("k2"), &rec) == STORE_OK &&
          store_lists_rebuild(w) == STORE_OK && store_write_commit(w) == STORE_OK);
    CHECK(strcmp(page_of(s, true, "u1", KIND_NONE, false, 0, NULL, 10).names, "i2,i1,") == 0);
    CHECK(store_stats(s, &st) == STORE_OK && st.idem_records == 1 && check_item_lists(s, "") == 0);
    store_idem_t got;
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_get(w, SPAN_LIT("u1"), SPAN_LIT("k2"), &got) == STORE_OK); /* the rebuild kept it */
    /* a key that could meet the list entries is refused by the store itself */
    CHECK(store_idem_put(w, SPAN_LIT("u1"), (span_t){"\0x", 2}, &rec) == STORE_ERROR);
    CHECK(store_idem_put(w, SPAN_LIT("u1"), (span_t){"", 0}, &rec) == STORE_ERROR);
    CHECK(store_idem_get(w, SPAN_LIT("u1"), (span_t){"\0x", 2}, &got) == STORE_ERROR);
    store_write_abort(w);
    store_close(s);
}

/* Every named database of the environment in dir, key and value, in order, as one text (for
 * comparing two stores byte for byte). */
static char *env_dump(const char *dir, size_t *len)
{
    MDB_env *env = raw_env(dir, MDB_RDONLY);
    MDB_txn *txn;
    MDB_dbi main_db;
    MDB_cursor *names;
    MDB_val nk, nv;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    if (!env || !out || mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0) {
        if (env)
            mdb_env_close(env);
        free(out);
        return NULL;
    }
    mdb_dbi_open(txn, NULL, 0, &main_db);
    mdb_cursor_open(txn, main_db, &names);
    for (int op = MDB_FIRST; mdb_cursor_get(names, &nk, &nv, (MDB_cursor_op)op) == 0; op = MDB_NEXT) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)nk.mv_size, (const char *)nk.mv_data);
        MDB_dbi db;
        MDB_cursor *cur;
        MDB_val k, v;
        if (mdb_dbi_open(txn, name, 0, &db) != 0 || mdb_cursor_open(txn, db, &cur) != 0)
            continue;
        for (int op2 = MDB_FIRST; mdb_cursor_get(cur, &k, &v, (MDB_cursor_op)op2) == 0; op2 = MDB_NEXT) {
            size_t need = strlen(name) + k.mv_size + v.mv_size + 32;
            while (n + need > cap)
                out = realloc(out, cap *= 2);
            n += (size_t)sprintf(out + n, "%s %zu %zu ", name, k.mv_size, v.mv_size);
            memcpy(out + n, k.mv_data, k.mv_size);
            memcpy(out + n + k.mv_size, v.mv_data, v.mv_size);
            n += k.mv_size + v.mv_size;
        }
        mdb_cursor_close(cur);
    }
    mdb_cursor_close(names);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    *len = n;
    return out;
}

static void file_copy(const char *from, const char *to, const char *name)
{
    char src[720], dst[720], buf[1 << 16];
    snprintf(src, sizeof src, "%s/%s", from, name);
    snprintf(dst, sizeof dst, "%s/%s", to, name);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    CHECK(in && out);
    for (size_t n; in && out && (n = fread(buf, 1, sizeof buf, in)) > 0;)
        CHECK(fwrite(buf, 1, n, out) == n);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
}

/* What a power loss may leave of data.mdb after the journal's base: the file cut after the base's
 * last page, both meta pages overwritten (the same as tests/e2e/test_crash.py's). */
static void damage_like_power_loss(const char *dir)
{
    size_t blen;
    char *b = file_get(dir, "journal-base", &blen);
    uint32_t psize = 0;
    uint64_t txnid = 0, last = 0;
    CHECK(b && blen >= 20);
    if (!b || blen < 20)
        return;
    memcpy(&psize, b + 4, 4);
    memcpy(&txnid, b + 8, 8);
    for (int i = 0; i < 2 && blen >= 20 + 2 * (size_t)psize; i++) {
        uint64_t pl, pt; /* MDB_meta after the page header: last page, then txn id */
        memcpy(&pl, b + 20 + (size_t)i * psize + 136, 8);
        memcpy(&pt, b + 20 + (size_t)i * psize + 144, 8);
        if (pt == txnid)
            last = pl;
    }
    free(b);
    CHECK(last > 0);
    char path[720];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    CHECK(truncate(path, (off_t)((last + 1) * psize)) == 0);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    for (size_t i = 0; f && i < 2 * (size_t)psize; i++)
        fputc(0xee, f);
    if (f)
        fclose(f);
}

/* The journal: a copy of the files of a store that is still open (what a crash leaves), damaged as a
 * power loss may leave it, opens as the same store, byte for byte: every kind of change the store
 * makes (rows, the log and its pruning, counts, the checkpoint, idempotency records and their sweep
 * and erasure, idempotency claims, their release, sweep and erasure, the lists and their rebuild, aux
 * and its range deletion), an aborted transaction
 * (not replayed), and one that changed nothing. Then a record cut short is not replayed, and a
 * journal with a transaction missing refuses to open. */
static void test_journal(const char *base)
{
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/journal-a", base);
    snprintf(b, sizeof b, "%s/journal-b", base);
    store_t *s = open_mode(a, "like,love", 1ull << 30, REACTION_MODE_MANY);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    pipeline_result_t res;
    size_t deleted;
    int64_t deltas[KINDS_MAX + 1] = {0, 2, 1};
    store_idem_t rec = {.expires_ms = 5000, .status = 200, .body = SPAN_LIT("{\"ok\":true}")};
    store_idem_t old = {.expires_ms = 10, .status = 201, .body = SPAN_LIT("{}")};
    CHECK(store_write_begin(s, &w) == STORE_OK);
    for (int i = 0; i < 40; i++) {
        char item[16], user[16];
        snprintf(item, sizeof item, "i%d", i % 7);
        snprintf(user, sizeof user, "u%d", i % 11);
        CHECK(apply_set(w, item, user, kindset_of(1 + i % 2) | (i % 3 ? kindset_of(2) : 0), 1000 + (uint64_t)i) ==
              STORE_OK);
    }
    CHECK(store_idem_put(w, SPAN_LIT("u1"), SPAN_LIT("k1"), &rec) == STORE_OK &&
          store_idem_put(w, SPAN_LIT("u2"), SPAN_LIT("k2"), &old) == STORE_OK &&
          store_idem_put(w, SPAN_LIT("u3"), SPAN_LIT("k3"), &rec) == STORE_OK);
    CHECK(store_aux_put(w, SPAN_LIT("t/1"), SPAN_LIT("one")) == STORE_OK &&
          store_aux_put(w, SPAN_LIT("t/2"), SPAN_LIT("two")) == STORE_OK);
    uint8_t fa[FINGERPRINT_LEN], fb[FINGERPRINT_LEN];
    memset(fa, 0xa, sizeof fa);
    memset(fb, 0xb, sizeof fb);
    store_claim_t claims[] = {{.user = SPAN_LIT("u1"), .key = SPAN_LIT("c1"), .fingerprint = fa, .expires_ms = 50},
                              {.user = SPAN_LIT("u1"), .key = SPAN_LIT("c2"), .fingerprint = fa, .expires_ms = 5000},
                              {.user = SPAN_LIT("u2"), .key = SPAN_LIT("c1"), .fingerprint = fb, .expires_ms = 5000},
                              {.user = SPAN_LIT("u3"), .key = SPAN_LIT("c1"), .fingerprint = fb, .expires_ms = 5000}};
    CHECK(store_claims_apply(w, claims, 4, 1) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(pipeline_fold(w, 1u << 20, &res) == STORE_OK && res.folded > 0);
    CHECK(store_counts_add(w, SPAN_LIT("extra"), deltas) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK); /* aborted: never replayed */
    CHECK(apply(w, "gone", "u1", 1, 5000) == STORE_OK && store_aux_put(w, SPAN_LIT("t/x"), SPAN_LIT("x")) == STORE_OK);
    store_write_abort(w);
    CHECK(store_write_begin(s, &w) == STORE_OK); /* changes nothing */
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(store_write_begin(s, &w) == STORE_OK);
    CHECK(store_idem_sweep(w, 100, 10, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_claims_sweep(w, 100, 10, &deleted) == STORE_OK && deleted == 1);
    CHECK(store_idem_delete_user(w, SPAN_LIT("u3"), 10, &deleted) == STORE_OK && deleted == 2);
    store_claim_t release = {.release = true, .user = SPAN_LIT("u2"), .key = SPAN_LIT("c1"), .fingerprint = fb};
    CHECK(store_claims_apply(w, &release, 1, 100) == STORE_OK && release.held);
    CHECK(store_aux_delete_range(w, SPAN_LIT("t/1"), SPAN_LIT("t/2")) == STORE_OK);
    CHECK(store_log_prune(w, 5, 1010, 100, &deleted) == STORE_OK && deleted == 5);
    CHECK(apply_set(w, "i1", "u1", KINDSET_EMPTY, 2000) == STORE_OK && apply(w, "i9", "u9", 2, 2001) == STORE_OK);
    CHECK(pipeline_fold(w, 1u << 20, &res) == STORE_OK);
    CHECK(store_lists_rebuild(w) == STORE_OK);
    uint64_t folded_to = 0;
    CHECK(store_checkpoint_get(w, &folded_to) == STORE_OK && store_checkpoint_put(w, folded_to) == STORE_OK);
    CHECK(store_write_commit(w) == STORE_OK);

    mkdir(b, 0750);
    const char *files[] = {"data.mdb", "journal-0", "journal-1", "journal-base", "TALLY_STORE"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        file_copy(a, b, files[i]);
    store_close(s); /* a clean close: a's state is final, and its base and records are gone */
    CHECK(!file_exists(a, "journal-base"));
    damage_like_power_loss(b);
    /* e: a crash in the opening after the replay, once the new base is written and before the
     * records are emptied: the base names the last record's transaction, so none is replayed again */
    char e[700];
    snprintf(e, sizeof e, "%s/journal-e", base);
    mkdir(e, 0750);
    file_copy(b, e, "journal-0");
    file_copy(b, e, "journal-1");
    store_t *r = open_mode(b, "like,love", 1ull << 30, REACTION_MODE_MANY);
    CHECK(r != NULL);
    file_copy(b, e, "data.mdb");
    file_copy(b, e, "journal-base");
    file_copy(b, e, "TALLY_STORE");
    if (r)
        store_close(r);
    r = open_mode(e, "like,love", 1ull << 30, REACTION_MODE_MANY);
    CHECK(r != NULL);
    if (r)
        store_close(r);
    size_t la = 0, lb = 0, le = 0;
    char *da = env_dump(a, &la), *db = env_dump(b, &lb), *de = env_dump(e, &le);
    CHECK(da && db && la > 1000 && la == lb && memcmp(da, db, la) == 0);
    CHECK(da && de && la == le && memcmp(da, de, la) == 0);
    free(da);
    free(db);
    free(de);

    /* a record cut short (a crash in its write) is not replayed; one missing refuses the store */
    s = open_mode(a, "like,love", 1ull << 30, REACTION_MODE_MANY);
    CHECK(s != NULL);
    if (!s)
        return;
    for (int round = 0; round < 3; round++) {
        CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "late", "u1", 1 + round % 2, 9000) == STORE_OK &&
              store_write_commit(w) == STORE_OK);
    }
    char c[700], d[700], h[700], h2[700], k[700], m[700];
    snprintf(c, sizeof c, "%s/journal-c", base);
    snprintf(d, sizeof d, "%s/journal-d", base);
    snprintf(h, sizeof h, "%s/journal-h", base);
    snprintf(h2, sizeof h2, "%s/journal-h2", base);
    snprintf(k, sizeof k, "%s/journal-k", base);
    snprintf(m, sizeof m, "%s/journal-m", base);
    const char *copies[] = {c, d, h, h2, k, m};
    for (size_t x = 0; x < sizeof copies / sizeof copies[0]; x++) {
        mkdir(copies[x], 0750);
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            file_copy(a, copies[x], files[i]);
    }
    store_close(s);
    size_t jlen;
    char *j = file_get(c, "journal-0", &jlen);
    CHECK(j && jlen > 100);
    if (j) {
        file_put(c, "journal-0", j, jlen - 3); /* the last record, cut short */
        /* the first record gone: the others follow a transaction the journal lacks */
        const size_t hl = JOURNALREC_HEADER_LEN;
        journalrec_head_t first = {0}, second = {0}, rec;
        bool parsed = journalrec_head_get((const uint8_t *)j, &first) && hl + first.len < jlen;
        CHECK(parsed);
        if (parsed) {
            file_put(d, "journal-0", j + hl + first.len, jlen - hl - first.len);
            /* k: the last record cut short in a file reused from an older generation, whose record
             * (at or before the base) lies behind it: a crash's cut, opens. m: a later whole record
             * behind the cut instead: damage, refused. */
            uint64_t last_txn = 0;
            for (size_t at = 0; at + hl <= jlen && journalrec_head_get((const uint8_t *)j + at, &rec);
                 at += hl + rec.len) /* the records' txn ids, in order */
                last_txn = rec.txnid;
            uint8_t tail[JOURNALREC_HEADER_LEN];
            journalrec_head_t old = {.txnid = 1, .len = 0, .nops = 0};
            old.crc = journalrec_crc(&old, NULL, 0);
            journalrec_head_put(tail, &old);
            char *cut = malloc(jlen - 3 + sizeof tail);
            CHECK(cut != NULL);
            if (cut) {
                memcpy(cut, j, jlen - 3);
                memcpy(cut + jlen - 3, tail, sizeof tail);
                file_put(k, "journal-0", cut, jlen - 3 + sizeof tail);
                journalrec_head_t later = {.txnid = last_txn + 5};
                later.crc = journalrec_crc(&later, NULL, 0);
                journalrec_head_put(tail, &later);
                memcpy(cut + jlen - 3, tail, sizeof tail);
                file_put(m, "journal-0", cut, jlen - 3 + sizeof tail);
                free(cut);
            }
            /* h: the first record damaged in place, the two after it whole; h2: the second one's
             * txn id damaged to look older than the first's, the third whole: not a crash's cut */
            char *j2 = malloc(jlen);
            CHECK(j2 != NULL);
            if (j2) {
                uint8_t *at2 = (uint8_t *)j2 + hl + first.len;
                memcpy(j2, j, jlen);
                CHECK(journalrec_head_get(at2, &second));
                second.txnid = 1; /* its checksum left as it was */
                journalrec_head_put(at2, &second);
                file_put(h2, "journal-0", j2, jlen);
                free(j2);
            }
            j[hl + first.len / 2] ^= 0x5a;
            file_put(h, "journal-0", j, jlen);
        }
    }
    free(j);
    r = open_mode(c, "like,love", 1ull << 30, REACTION_MODE_MANY);
    CHECK(r != NULL);
    reaction_row_t row;
    store_read_t *snap;
    /* a change that bypasses the journal's wrappers (a defect the guard catches): the commit waits
     * for a base that holds it, so a crash right after it keeps it */
    if (r) {
        CHECK(store_write_begin(r, &w) == STORE_OK);
        MDB_val bk = {6, "bypass"}, bv = {1, "1"};
        CHECK(mdb_put(((lmdb_write_t *)w)->txn, ((lmdb_store_t *)r)->meta, &bk, &bv, 0) == 0);
        CHECK(store_write_commit(w) == STORE_OK);
        char f[700];
        snprintf(f, sizeof f, "%s/journal-f", base);
        mkdir(f, 0750);
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            file_copy(c, f, files[i]);
        CHECK(store_write_begin(r, &w) == STORE_OK && apply(w, "after", "u1", 1, 9100) == STORE_OK &&
              store_write_commit(w) == STORE_OK);
        for (size_t i = 1; i < 3; i++) /* the record after it, in its own file */
            file_copy(c, f, files[i]);
        damage_like_power_loss(f);
        store_t *g = open_mode(f, "like,love", 1ull << 30, REACTION_MODE_MANY);
        CHECK(g != NULL);
        if (g) {
            CHECK(store_read_begin(g, &snap) == STORE_OK &&
                  store_read_row(snap, SPAN_LIT("after"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 1);
            store_read_end(snap);
            store_close(g);
        }
        MDB_env *fe = raw_env(f, MDB_RDONLY);
        MDB_txn *ft;
        MDB_dbi fm;
        MDB_val got;
        CHECK(fe && mdb_txn_begin(fe, NULL, MDB_RDONLY, &ft) == 0 && mdb_dbi_open(ft, "meta", 0, &fm) == 0 &&
              mdb_get(ft, fm, &bk, &got) == 0 && got.mv_size == 1);
        if (fe) {
            mdb_txn_abort(ft);
            mdb_env_close(fe);
        }
    }
    if (r) {
        CHECK(store_read_begin(r, &snap) == STORE_OK &&
              store_read_row(snap, SPAN_LIT("late"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 2);
        store_read_end(snap);
        store_close(r);
    }
    char err[512] = "";
    kinds_t kinds;
    kinds_parse(&kinds, "like,love", err, sizeof err);
    kinds.mode = REACTION_MODE_MANY;
    store_options_t opt = {.map_size_bytes = 1ull << 30};
    CHECK(store_open(d, &kinds, &opt, &r, err, sizeof err) != STORE_OK && strstr(err, "lacks transaction"));
    const char *damaged[] = {h, h2, m};
    for (size_t x = 0; x < sizeof damaged / sizeof damaged[0]; x++) {
        err[0] = 0;
        CHECK(store_open(damaged[x], &kinds, &opt, &r, err, sizeof err) != STORE_OK &&
              strstr(err, "journal-0 is damaged"));
    }
    r = open_mode(k, "like,love", 1ull << 30, REACTION_MODE_MANY);
    CHECK(r != NULL);
    if (r) {
        CHECK(store_read_begin(r, &snap) == STORE_OK &&
              store_read_row(snap, SPAN_LIT("late"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 2);
        store_read_end(snap);
        store_close(r);
    }
}

/* The base's pages are never reused while it is the base: after a checkpoint, a transaction that
 * frees pages of the base's tree (updates) and later ones that could take them (other content),
 * then a copy of the files damaged as a power loss may leave them, opens as the same store. Were
 * the base not pinned, the later ones would write over its pages, and the replay would start from
 * a tree they had overwritten. */
static void test_journal_keeps_the_base(const char *base)
{
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/journal-pin-a", base);
    snprintf(b, sizeof b, "%s/journal-pin-b", base);
    store_t *s = open_mode(a, "like,love", 1ull << 30, REACTION_MODE_ONE);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    char item[32], user[32], key[32], val[600];
    CHECK(store_write_begin(s, &w) == STORE_OK);
    for (int i = 0; i < 3000; i++) {
        snprintf(item, sizeof item, "item-%05d", i);
        snprintf(user, sizeof user, "user-%05d", i % 97);
        CHECK(apply(w, item, user, 1, 1000) == STORE_OK);
    }
    CHECK(store_write_commit(w) == STORE_OK);
    CHECK(lmdb_journal_checkpoint_wait((lmdb_store_t *)s) == 0); /* the base: the rows above */
    CHECK(store_write_begin(s, &w) == STORE_OK);                 /* frees pages of the base's tree */
    for (int i = 0; i < 3000; i += 7) {
        snprintf(item, sizeof item, "item-%05d", i);
        snprintf(user, sizeof user, "user-%05d", i % 97);
        CHECK(apply(w, item, user, 2, 2000) == STORE_OK);
    }
    CHECK(store_write_commit(w) == STORE_OK);
    memset(val, 'v', sizeof val);
    for (int t = 0; t < 4; t++) { /* could take the pages freed above, if nothing kept them */
        CHECK(store_write_begin(s, &w) == STORE_OK);
        for (int i = 0; i < 400; i++) {
            snprintf(key, sizeof key, "x/%d/%05d", t, i);
            CHECK(store_aux_put(w, (span_t){key, strlen(key)}, (span_t){val, sizeof val}) == STORE_OK);
        }
        CHECK(store_write_commit(w) == STORE_OK);
    }
    mkdir(b, 0750);
    const char *files[] = {"data.mdb", "journal-0", "journal-1", "journal-base", "TALLY_STORE"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        file_copy(a, b, files[i]);
    store_close(s);
    damage_like_power_loss(b);
    store_t *r = open_mode(b, "like,love", 1ull << 30, REACTION_MODE_ONE);
    CHECK(r != NULL);
    if (r)
        store_close(r);
    size_t la = 0, lb = 0;
    char *da = env_dump(a, &la), *db = env_dump(b, &lb);
    CHECK(da && db && la > 100000 && la == lb && memcmp(da, db, la) == 0);
    free(da);
    free(db);
}

static bool always(void *arg)
{
    (void)arg;
    return true;
}

/* The offsets of journal-0's records in j (at most max), and their headers. */
static size_t journal_records(const char *j, size_t jlen, size_t *at, journalrec_head_t *h, size_t max)
{
    size_t n = 0;
    for (size_t off = 0;
         n < max && off + JOURNALREC_HEADER_LEN <= jlen && journalrec_head_get((const uint8_t *)j + off, &h[n]) &&
         off + JOURNALREC_HEADER_LEN + h[n].len <= jlen;
         off += JOURNALREC_HEADER_LEN + h[n].len, n++)
        at[n] = off;
    return n;
}

static int row_version(store_t *s, const char *item, const char *user)
{
    store_read_t *snap;
    reaction_row_t row = {0};
    if (store_read_begin(s, &snap) != STORE_OK)
        return -1;
    int rc = store_read_row(snap, span_of(item), span_of(user), &row);
    store_read_end(snap);
    return rc == STORE_OK ? (int)row.version : -1;
}

static size_t log_entries(store_read_t *snap)
{
    uint64_t first = 0, last = 0;
    return store_read_log_bounds(snap, &first, &last) == STORE_OK && last ? (size_t)(last - first + 1) : 0;
}

/* Epochs: batches the writer deferred (more waiting) are committed into one LMDB transaction, each
 * durable by its record (one part each) and its rows seen by readers at once through the overlay,
 * while the rest (the log here) is seen when the epoch commits: at a batch not deferred, an aborted
 * one, or store_flush. A crash with an epoch open replays its parts as one transaction; a part
 * damaged in place with a later one behind it, or one missing, refuses the store; a last part cut
 * short (the crash during its write) is not replayed. A map near full never holds an epoch. */
static void test_epochs(const char *base)
{
    char a[700], b[700], c[700], d[700], e[700], f[700];
    snprintf(a, sizeof a, "%s/epoch-a", base);
    snprintf(b, sizeof b, "%s/epoch-b", base);
    snprintf(c, sizeof c, "%s/epoch-c", base);
    snprintf(d, sizeof d, "%s/epoch-d", base);
    snprintf(e, sizeof e, "%s/epoch-e", base);
    snprintf(f, sizeof f, "%s/epoch-f", base);
    store_t *s = open_with(a, "like,love", 1ull << 30);
    CHECK(s != NULL);
    if (!s)
        return;
    store_write_t *w;
    store_read_t *old, *snap;
    reaction_row_t row;
    CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "i1", "u1", 1, 1000) == STORE_OK &&
          apply(w, "i2", "u2", 1, 1000) == STORE_OK);
    store_write_defer(w, always, NULL);
    CHECK(store_write_commit(w) == STORE_OK && store_pending(s));
    CHECK(store_read_begin(s, &old) == STORE_OK);
    CHECK(store_read_row(old, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 1);
    CHECK(log_entries(old) == 0); /* the log is seen with the epoch's commit */
    CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "i1", "u1", 2, 1001) == STORE_OK &&
          apply(w, "i3", "u3", 1, 1001) == STORE_OK);
    store_write_defer(w, always, NULL);
    CHECK(store_write_commit(w) == STORE_OK && store_pending(s));
    CHECK(store_read_row(old, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 2 &&
          row.set == kindset_of(2)); /* a snapshot begun before the batch sees its row too */
    CHECK(row_version(s, "i3", "u3") == 1);
    CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "i4", "u4", 1, 1002) == STORE_OK);
    store_write_abort(w); /* the epoch before it is committed: seen whole */
    CHECK(!store_pending(s));
    CHECK(store_read_row(old, SPAN_LIT("i1"), SPAN_LIT("u1"), &row) == STORE_OK && row.version == 2);
    store_read_end(old);
    CHECK(store_read_begin(s, &snap) == STORE_OK);
    CHECK(log_entries(snap) == 4);
    CHECK(store_read_row(snap, SPAN_LIT("i4"), SPAN_LIT("u4"), &row) == STORE_OK && row.version == 0);
    store_read_end(snap);
    /* a second epoch of three batches, left open: the crash */
    const char *users[] = {"u5", "u6", "u7"};
    for (int i = 0; i < 3; i++) {
        CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "i5", users[i], 1, 2000) == STORE_OK);
        store_write_defer(w, always, NULL);
        CHECK(store_write_commit(w) == STORE_OK && store_pending(s));
    }
    CHECK(row_version(s, "i5", "u7") == 1);
    const char *files[] = {"data.mdb", "journal-0", "journal-1", "journal-base", "TALLY_STORE"};
    const char *copies[] = {b, c, d, e};
    for (size_t x = 0; x < sizeof copies / sizeof copies[0]; x++) {
        mkdir(copies[x], 0750);
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            file_copy(a, copies[x], files[i]);
    }
    CHECK(store_flush(s) == STORE_OK && !store_pending(s));
    CHECK(store_read_begin(s, &snap) == STORE_OK && log_entries(snap) == 7);
    store_read_end(snap);
    store_close(s);
    size_t jlen;
    char *j = file_get(b, "journal-0", &jlen);
    size_t at[16];
    journalrec_head_t h[16];
    size_t n = j ? journal_records(j, jlen, at, h, 16) : 0;
    /* the first epoch's two parts, then the second's three (the aborted batch has none) */
    CHECK(n == 5 && h[0].part == 0 && h[1].part == 1 && h[1].txnid == h[0].txnid && h[2].part == 0 &&
          h[2].txnid == h[0].txnid + 1 && h[4].part == 2 && h[4].txnid == h[2].txnid);
    if (n == 5) {
        char *x = malloc(jlen);
        CHECK(x != NULL);
        if (x) {
            memcpy(x, j, jlen);
            x[at[3] + JOURNALREC_HEADER_LEN + 2] ^= 0x5a; /* c: the middle part damaged in place */
            file_put(c, "journal-0", x, jlen);
            file_put(d, "journal-0", j, jlen - 3); /* d: the last part cut short */
            memcpy(x, j, at[3]);                   /* e: the middle part missing */
            memcpy(x + at[3], j + at[4], jlen - at[4]);
            file_put(e, "journal-0", x, at[3] + jlen - at[4]);
            free(x);
        }
    }
    free(j);
    damage_like_power_loss(b);
    store_t *r = open_with(b, "like,love", 1ull << 30);
    CHECK(r != NULL);
    if (r) {
        CHECK(row_version(r, "i5", "u5") == 1 && row_version(r, "i5", "u7") == 1 && row_version(r, "i1", "u1") == 2 &&
              row_version(r, "i4", "u4") == 0 && !store_pending(r));
        CHECK(store_read_begin(r, &snap) == STORE_OK && log_entries(snap) == 7);
        store_read_end(snap);
        store_close(r);
    }
    r = open_with(d, "like,love", 1ull << 30);
    CHECK(r != NULL);
    if (r) {
        CHECK(row_version(r, "i5", "u6") == 1 && row_version(r, "i5", "u7") == 0);
        store_close(r);
    }
    char err[512] = "";
    kinds_t kinds;
    kinds_parse(&kinds, "like,love", err, sizeof err);
    store_options_t opt = {.map_size_bytes = 1ull << 30};
    CHECK(store_open(c, &kinds, &opt, &r, err, sizeof err) != STORE_OK && strstr(err, "journal-0 is damaged"));
    err[0] = 0;
    CHECK(store_open(e, &kinds, &opt, &r, err, sizeof err) != STORE_OK && strstr(err, "lacks part 1"));
    /* g: a store crashed by the build before epochs, whose base ("TLRB") and records ("TLRJ", one per
     * transaction, the id its txn id alone) are of the first format: replayed */
    char g[700], g0[700];
    snprintf(g0, sizeof g0, "%s/epoch-g0", base);
    snprintf(g, sizeof g, "%s/epoch-g", base);
    s = open_with(g0, "like,love", 1ull << 30);
    CHECK(s != NULL);
    if (s) {
        for (int i = 0; i < 3; i++)
            CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "old", users[i], 1, 3000) == STORE_OK &&
                  store_write_commit(w) == STORE_OK);
        mkdir(g, 0750);
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            file_copy(g0, g, files[i]);
        store_close(s);
        char *jg = file_get(g, "journal-0", &jlen);
        n = jg ? journal_records(jg, jlen, at, h, 16) : 0;
        CHECK(n == 3);
        for (size_t i = 0; i < n; i++) {
            CHECK(h[i].part == 0 && !h[i].first_format);
            h[i].first_format = true;
            h[i].crc = journalrec_crc(&h[i], (const uint8_t *)jg + at[i] + JOURNALREC_HEADER_LEN, h[i].len);
            journalrec_head_put((uint8_t *)jg + at[i], &h[i]);
        }
        if (jg)
            file_put(g, "journal-0", jg, jlen);
        free(jg);
        size_t blen;
        char *bg = file_get(g, "journal-base", &blen);
        CHECK(bg && blen > 4 && memcmp(bg, "TLRE", 4) == 0);
        if (bg && blen > 4) {
            memcpy(bg, "TLRB", 4);
            file_put(g, "journal-base", bg, blen);
        }
        free(bg);
        damage_like_power_loss(g);
        r = open_with(g, "like,love", 1ull << 30);
        CHECK(r != NULL);
        if (r) {
            CHECK(row_version(r, "old", "u5") == 1 && row_version(r, "old", "u7") == 1);
            store_close(r);
        }
    }
    /* a map with less than EPOCH_MAP_HEADROOM left: every batch commits */
    s = open_with(f, "like,love", 1ull << 24);
    CHECK(s != NULL);
    if (s) {
        CHECK(store_write_begin(s, &w) == STORE_OK && apply(w, "i1", "u1", 1, 1000) == STORE_OK);
        store_write_defer(w, always, NULL);
        CHECK(store_write_commit(w) == STORE_OK && !store_pending(s));
        store_close(s);
    }
}

void test_store(void)
{
    char base[] = "/tmp/tally-unit-XXXXXX";
    if (!mkdtemp(base)) {
        CHECK(!"mkdtemp");
        return;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/a", base);
    test_rows_log_fold(dir);
    snprintf(dir, sizeof dir, "%s/voided", base);
    test_voided(dir);
    snprintf(dir, sizeof dir, "%s/c", base);
    test_full(dir);
    snprintf(dir, sizeof dir, "%s/d", base);
    test_user_items(dir);
    snprintf(dir, sizeof dir, "%s/export", base);
    test_export_page(dir);
    snprintf(dir, sizeof dir, "%s/e", base);
    test_schema_upgrade(dir);
    snprintf(dir, sizeof dir, "%s/f", base);
    test_recount_unsummable_log(dir);
    test_foreign_dirs(base);
    snprintf(dir, sizeof dir, "%s/g", base);
    test_corrupt_counts(dir);
    snprintf(dir, sizeof dir, "%s/h", base);
    test_sets(dir);
    snprintf(dir, sizeof dir, "%s/lists", base);
    test_lists(dir);
    test_journal(base);
    test_journal_keeps_the_base(base);
    test_epochs(base);
    rm_dir(base);
}
