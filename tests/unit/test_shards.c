/* test_shards.c — shards_open (engine/shards.h) on two stores as two shards: the identities the
 * first open writes, and the lists a later open refuses. On the embedded store always (two
 * directories), and on PostgreSQL when TALLY_SEAM_PG names a server (two databases made here, as
 * test_seam.c makes its own; tests/pg/seam.py runs `unit_tests seam shards` with it), where the same
 * databases are also reached through another spelling of their URIs. */
#include <libpq-fe.h> /* only to make the databases */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/shards.h"
#include "store/store.h"
#include "unit.h"

typedef struct {
    const char *name;
    const char *pg_uri; /* URI template with %s for the database; NULL: the embedded store */
    char base[64];
    unsigned serial;
    kinds_t kinds;
    store_options_t opt;
} fixture_t;

/* A fresh, empty location into loc (and the database's name into db on PostgreSQL). */
static bool new_location(fixture_t *t, char loc[600], char db[64])
{
    t->serial++;
    if (!t->pg_uri) {
        snprintf(loc, 600, "%s/shard%u", t->base, t->serial);
        return true;
    }
    char admin[600];
    snprintf(db, 64, "shards_%ld_%u", (long)getpid(), t->serial);
    snprintf(admin, sizeof admin, t->pg_uri, "postgres");
    snprintf(loc, 600, t->pg_uri, db);
    PGconn *conn = PQconnectdb(admin);
    bool ok = PQstatus(conn) == CONNECTION_OK;
    if (ok) {
        char sql[128];
        snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\"", db);
        PGresult *res = PQexec(conn, sql);
        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            fprintf(stderr, "shards: %s: %s", sql, PQerrorMessage(conn));
        PQclear(res);
    } else {
        fprintf(stderr, "shards: cannot connect to %s: %s", admin, PQerrorMessage(conn));
    }
    PQfinish(conn);
    return ok;
}

/* shards_open of the list; on failure the error into err (and NULL). */
static shards_t *open_list(fixture_t *t, const char *const *locs, size_t n, char err[512])
{
    shards_t *s = NULL;
    err[0] = '\0';
    if (shards_open(locs, n, &t->kinds, &t->opt, &s, err, 512) != 0)
        return NULL;
    return s;
}

/* The identity one store holds, opened alone (as the tools do): 1 found, 0 none, -1 error. */
static int stored_identity(fixture_t *t, const char *loc, shard_identity_t *id)
{
    store_t *st;
    char err[512];
    bool found = false;
    if (store_open(loc, &t->kinds, &t->opt, &st, err, sizeof err) != STORE_OK)
        return -1;
    int rc = shards_read_identity(st, id, &found, err, sizeof err);
    store_close(st);
    return rc != STORE_OK ? -1 : found;
}

/* Puts tally data into the store at loc, for shards_open: a reaction (its row and log entry), or
 * only a record of another module (a policy's, as an operator sets before any write). */
static bool put_data(fixture_t *t, const char *loc, bool reaction)
{
    store_t *st;
    char err[512];
    if (store_open(loc, &t->kinds, &t->opt, &st, err, sizeof err) != STORE_OK)
        return false;
    store_write_t *w = NULL;
    int rc = store_write_begin(st, &w);
    if (rc == STORE_OK && reaction) {
        reaction_row_t row = {kindset_of(1), 1};
        transition_t tr = {SPAN_LIT("i1"), SPAN_LIT("u1"), KINDSET_EMPTY, row.set, 1, 1000, 0};
        uint64_t seq;
        if ((rc = store_row_get(w, SPAN_LIT("i1"), SPAN_LIT("u1"), &(reaction_row_t){0})) == STORE_OK &&
            (rc = store_row_put(w, SPAN_LIT("i1"), SPAN_LIT("u1"), &row)) == STORE_OK)
            rc = store_log_append(w, &tr, &seq);
    } else if (rc == STORE_OK) {
        rc = store_aux_put(w, SPAN_LIT("policy/test"), SPAN_LIT("1"));
    }
    if (rc == STORE_OK)
        rc = store_write_commit(w);
    else if (w)
        store_write_abort(w);
    store_close(st);
    return rc == STORE_OK;
}

typedef struct {
    fixture_t *t;
    const char *const *locs;
    shards_t *s;
    char err[512];
} opener_t;

static void *open_thread(void *arg)
{
    opener_t *o = arg;
    o->s = open_list(o->t, o->locs, 2, o->err);
    return NULL;
}

/* Two nodes starting at once on the same two fresh databases end up in one cluster: each
 * identity is written once, under the record's lock, and the later node adopts it. Repeated, as
 * the race is not certain on every try. */
static void concurrent_first_starts(fixture_t *t)
{
    for (int round = 0; round < 2; round++) {
        char g[600], h[600], db[64];
        if (!new_location(t, g, db) || !new_location(t, h, db)) {
            CHECK(!"locations");
            return;
        }
        const char *gh[] = {g, h};
        opener_t o[2] = {{.t = t, .locs = gh}, {.t = t, .locs = gh}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&th[i], NULL, open_thread, &o[i]) == 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        CHECK(o[0].s != NULL && o[1].s != NULL);
        if (o[0].s && o[1].s) {
            shard_identity_t x, y, got;
            shards_identity(o[0].s, 0, &x);
            shards_identity(o[1].s, 0, &y);
            CHECK(strcmp(x.cluster, y.cluster) == 0);
            shards_close(o[0].s);
            shards_close(o[1].s);
            CHECK(stored_identity(t, g, &got) == 1 && strcmp(got.cluster, x.cluster) == 0 && got.shard == 0);
            CHECK(stored_identity(t, h, &got) == 1 && strcmp(got.cluster, x.cluster) == 0 && got.shard == 1);
        } else {
            fprintf(stderr, "  shards %s: concurrent starts: \"%s\" \"%s\"\n", t->name, o[0].err, o[1].err);
            shards_close(o[0].s);
            shards_close(o[1].s);
        }
    }
}

#define CHECK_ERR(s, err, want)                                                                                        \
    do {                                                                                                               \
        CHECK((s) == NULL && strstr(err, want) != NULL);                                                               \
        if ((s) != NULL || !strstr(err, want))                                                                         \
            fprintf(stderr, "  shards %s: got \"%s\", wanted \"%s\"\n", t->name, err, want);                           \
        shards_close(s);                                                                                               \
    } while (0)

static void run(fixture_t *t)
{
    char a[600], b[600], c[600], d[600], e[600], dba[64] = "", dbb[64] = "", db[64];
    if (!new_location(t, a, dba) || !new_location(t, b, dbb) || !new_location(t, c, db) || !new_location(t, d, db) ||
        !new_location(t, e, db)) {
        CHECK(!"locations");
        return;
    }
    char err[512];
    /* the first open writes "shard k of 2" of one new cluster into each */
    const char *ab[] = {a, b};
    shards_t *s = open_list(t, ab, 2, err);
    CHECK(s != NULL);
    if (!s) {
        fprintf(stderr, "  shards %s: %s\n", t->name, err);
        return;
    }
    CHECK(shards_count(s) == 2 && shards_store(s, 0) && shards_store(s, 1) && !shards_store(s, 2));
    shard_identity_t cluster, got;
    shards_identity(s, 1, &cluster);
    CHECK(cluster.shard == 1 && cluster.map.count == 2 && shard_cluster_id_valid(span_of(cluster.cluster)));
    CHECK(shards_of_item(s, SPAN_LIT("123456789")) == 1 && shards_of_user(s, SPAN_LIT("a")) == 1); /* 2342, 3651 */
    CHECK(shards_of_item(s, SPAN_LIT("The quick brown fox jumps over the lazy dog")) == 0);        /* 825 */
    shards_close(s);
    CHECK(stored_identity(t, a, &got) == 1 && got.shard == 0 && got.map.count == 2 &&
          strcmp(got.cluster, cluster.cluster) == 0);
    CHECK(stored_identity(t, b, &got) == 1 && got.shard == 1 && strcmp(got.cluster, cluster.cluster) == 0);

    /* reopened in the same order: checked, the same cluster */
    s = open_list(t, ab, 2, err);
    CHECK(s != NULL);
    if (s) {
        shards_identity(s, 0, &got);
        CHECK(strcmp(got.cluster, cluster.cluster) == 0 && shard_map_diff(&got.map, &cluster.map) == -1);
    }
    shards_close(s);

    /* swapped: position 0 holds shard 1 */
    const char *ba[] = {b, a};
    char want[256];
    snprintf(want, sizeof want, "database at position 0 is shard 1 of cluster %s", cluster.cluster);
    s = open_list(t, ba, 2, err);
    CHECK_ERR(s, err, want);
    /* a third location, and one alone: another count; nothing is written into the third */
    const char *abc[] = {a, b, c};
    s = open_list(t, abc, 3, err);
    CHECK_ERR(s, err, "has 2 shards, this node lists 3");
    CHECK(stored_identity(t, c, &got) == 0);
    const char *only_a[] = {a};
    s = open_list(t, only_a, 1, err);
    CHECK_ERR(s, err, "has 2 shards, this node lists 1");

    /* a database with tally data but no identity: refused as one of two, upgraded as shard 0 of 1 */
    CHECK(put_data(t, d, true));
    const char *dc[] = {d, c};
    s = open_list(t, dc, 2, err);
    CHECK_ERR(s, err, "database at position 0 holds tally data but no cluster identity");
    CHECK(stored_identity(t, d, &got) == 0 && stored_identity(t, c, &got) == 0);
    const char *only_d[] = {d};
    s = open_list(t, only_d, 1, err);
    CHECK(s != NULL);
    shards_close(s);
    CHECK(stored_identity(t, d, &got) == 1 && got.shard == 0 && got.map.count == 1 &&
          strcmp(got.cluster, cluster.cluster) != 0);
    /* another cluster's database in a position */
    const char *ad[] = {a, d};
    s = open_list(t, ad, 2, err);
    CHECK_ERR(s, err, "database at position 1 is shard 0 of cluster ");

    /* once the cluster holds data, an empty database in a shard's place is refused */
    CHECK(put_data(t, a, false));
    const char *ae[] = {a, e};
    s = open_list(t, ae, 2, err);
    CHECK_ERR(s, err, "database at position 1 holds no cluster identity");
    CHECK(stored_identity(t, e, &got) == 0);

    /* a first start interrupted between two databases (shard 0's identity written, shard 1 still
     * empty): the next start finishes it in the same cluster */
    char f1[600], f2[600];
    CHECK(new_location(t, f1, db) && new_location(t, f2, db));
    shard_identity_t half = {.cluster = "00112233445566778899aabbccddeeff", .shard = 0};
    shard_map_even(&half.map, 2);
    char *text = shard_identity_format(&half);
    store_t *st = NULL;
    store_write_t *w = NULL;
    CHECK(text && store_open(f1, &t->kinds, &t->opt, &st, err, sizeof err) == STORE_OK);
    if (text && st && store_write_begin(st, &w) == STORE_OK) {
        CHECK(store_aux_put(w, SPAN_LIT(SHARDS_IDENTITY_KEY), span_of(text)) == STORE_OK);
        CHECK(store_write_commit(w) == STORE_OK);
    }
    store_close(st);
    free(text);
    const char *half_list[] = {f1, f2};
    s = open_list(t, half_list, 2, err);
    CHECK(s != NULL);
    shards_close(s);
    CHECK(stored_identity(t, f2, &got) == 1 && got.shard == 1 && strcmp(got.cluster, half.cluster) == 0);

    if (t->pg_uri) {
        /* the same two databases under other spellings of their URIs: identities, not text, match */
        char a2[700], b2[700];
        const char *at = strstr(t->pg_uri, "127.0.0.1");
        CHECK(at != NULL);
        if (at) {
            char tmpl[700];
            snprintf(tmpl, sizeof tmpl, "%.*slocalhost%s&application_name=another_node", (int)(at - t->pg_uri),
                     t->pg_uri, at + strlen("127.0.0.1"));
            snprintf(a2, sizeof a2, tmpl, dba);
            snprintf(b2, sizeof b2, "%s&sslmode=disable", b);
            const char *ab2[] = {a2, b2};
            s = open_list(t, ab2, 2, err);
            CHECK(s != NULL);
            if (!s)
                fprintf(stderr, "  shards %s: other spellings: %s\n", t->name, err);
            shards_close(s);
            const char *ba2[] = {b2, a2};
            s = open_list(t, ba2, 2, err);
            CHECK_ERR(s, err, want);
        }
        /* a database that cannot be reached: at a later start (shard 0 holds the identity) opened,
         * serving nothing until it is reached and checked; at a first start refused, naming it */
        const char *unreachable = "postgresql://postgres@127.0.0.1:1/none?connect_timeout=2";
        const char *down[] = {a, unreachable};
        s = open_list(t, down, 2, err);
        CHECK(s != NULL && store_ready(shards_store(s, 0)) && !store_ready(shards_store(s, 1)));
        shards_close(s);
        char fresh[600];
        CHECK(new_location(t, fresh, db));
        const char *first_down[] = {fresh, unreachable};
        s = open_list(t, first_down, 2, err);
        CHECK_ERR(s, err, "1 could not be reached: a first start needs every database");
    }
}

void test_shards(void)
{
    fixture_t lmdb = {.name = "lmdb", .opt = {.map_size_bytes = 1ull << 30}};
    kinds_parse(&lmdb.kinds, "like,dislike", (char[256]){0}, 256);
    snprintf(lmdb.base, sizeof lmdb.base, "/tmp/tally-shards-XXXXXX");
    if (!mkdtemp(lmdb.base)) {
        CHECK(!"mkdtemp");
        return;
    }
    run(&lmdb);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lmdb.base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", lmdb.base);

    const char *uri = getenv("TALLY_SEAM_PG");
    if (uri && *uri) {
        fixture_t pg = {.name = "pg", .pg_uri = uri, .kinds = lmdb.kinds};
        run(&pg);
        concurrent_first_starts(&pg); /* two processes on one database: PostgreSQL's case */
    }
}
