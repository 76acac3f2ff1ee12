/* test_claims.c — engine/claims.h on the embedded store, through a running writer: a key taken,
 * taken again by its retry, refused to another request, released only by its own fingerprint,
 * replaced once expired, and swept; many claims queued at once decided in their order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/answer.h"
#include "engine/claims.h"
#include "unit.h"

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int outcome; /* -1 until done */
} waiter_t;

static void waiter_done(void *arg, int outcome)
{
    waiter_t *wt = arg;
    pthread_mutex_lock(&wt->lock);
    wt->outcome = outcome;
    pthread_cond_broadcast(&wt->cond);
    pthread_mutex_unlock(&wt->lock);
}

static void waiter_init(waiter_t *wt)
{
    pthread_mutex_init(&wt->lock, NULL);
    pthread_cond_init(&wt->cond, NULL);
    wt->outcome = -1;
}

static int waiter_wait(waiter_t *wt)
{
    pthread_mutex_lock(&wt->lock);
    while (wt->outcome < 0)
        pthread_cond_wait(&wt->cond, &wt->lock);
    int outcome = wt->outcome;
    pthread_mutex_unlock(&wt->lock);
    pthread_cond_destroy(&wt->cond);
    pthread_mutex_destroy(&wt->lock);
    return outcome;
}

static void fp_of(uint8_t fp[FINGERPRINT_LEN], uint8_t byte)
{
    memset(fp, byte, FINGERPRINT_LEN);
}

/* A claim taken and waited for: its outcome, or -2 when it was not queued. */
static int take(writer_t *w, const char *user, const char *key, uint8_t byte)
{
    uint8_t fp[FINGERPRINT_LEN];
    fp_of(fp, byte);
    waiter_t wt;
    waiter_init(&wt);
    if (claims_take(w, span_of(user), span_of(key), fp, waiter_done, &wt) != 0) {
        pthread_cond_destroy(&wt.cond);
        pthread_mutex_destroy(&wt.lock);
        return -2;
    }
    return waiter_wait(&wt);
}

static int release(writer_t *w, const char *user, const char *key, uint8_t byte)
{
    uint8_t fp[FINGERPRINT_LEN];
    fp_of(fp, byte);
    return claims_release(w, span_of(user), span_of(key), fp);
}

typedef struct {
    char dir[64];
    kinds_t kinds;
    store_t *store;
    writer_t *writer;
} bench_t;

static bool bench_open(bench_t *b, uint64_t ttl_ms)
{
    char err[256];
    snprintf(b->dir, sizeof b->dir, "/tmp/tally-unit-claims-XXXXXX");
    kinds_parse(&b->kinds, "like,dislike", err, sizeof err);
    if (!mkdtemp(b->dir))
        return false;
    store_options_t opt = {.map_size_bytes = 1ull << 26};
    if (store_open(b->dir, &b->kinds, &opt, &b->store, err, sizeof err) != STORE_OK)
        return false;
    writer_options_t wopt = {.queue_max = 256,
                             .batch_max = 16,
                             .fold_max = 1024,
                             .idem_ttl_ms = ttl_ms,
                             .sweep_max = 2,
                             .log_retention_ms = 60000};
    return writer_start(b->store, &b->kinds, &wopt, &b->writer) == 0;
}

static void bench_close(bench_t *b)
{
    writer_stop(b->writer);
    store_close(b->store);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", b->dir);
}

static void react_done(write_cmd_t *cmd)
{
    waiter_done(cmd->done_arg, cmd->answer.status);
}

/* A keyed reaction write (like) of item by user, answered to wr. */
static void react_init(write_cmd_t *cmd, waiter_t *wr, const char *item, const char *user, const char *key,
                       uint8_t byte)
{
    *cmd = (write_cmd_t){.type = WRITE_REACT, .done = react_done, .done_arg = wr};
    waiter_init(wr);
    cmd->react.op = REACT_SET;
    cmd->react.arg = kindset_of(1);
    cmd->react.item_len = strlen(item);
    memcpy(cmd->react.item, item, cmd->react.item_len);
    cmd->react.user_len = strlen(user);
    memcpy(cmd->react.user, user, cmd->react.user_len);
    cmd->react.key_len = strlen(key);
    memcpy(cmd->react.key, key, cmd->react.key_len);
    fp_of(cmd->react.fingerprint, byte);
}

static void test_rules(void)
{
    bench_t b = {0};
    CHECK(bench_open(&b, 60000));
    if (!b.writer)
        return;
    writer_t *w = b.writer;
    CHECK(take(w, "u1", "k1", 0xa) == CLAIM_TAKEN);
    CHECK(take(w, "u1", "k1", 0xa) == CLAIM_TAKEN);    /* the retry proceeds */
    CHECK(take(w, "u1", "k1", 0xb) == CLAIM_MISMATCH); /* another request */
    CHECK(take(w, "u2", "k1", 0xb) == CLAIM_TAKEN);    /* keys are per user */
    CHECK(take(w, "u1", "k2", 0xb) == CLAIM_TAKEN);
    /* a release by another fingerprint does nothing; by its own, frees the key */
    CHECK(release(w, "u1", "k1", 0xb) == 0);
    CHECK(take(w, "u1", "k1", 0xb) == CLAIM_MISMATCH);
    CHECK(release(w, "u1", "k1", 0xa) == 0);
    CHECK(take(w, "u1", "k1", 0xb) == CLAIM_TAKEN);
    CHECK(take(w, "u1", "k1", 0xa) == CLAIM_MISMATCH);
    /* not queued: nothing to claim with */
    uint8_t fp[FINGERPRINT_LEN];
    fp_of(fp, 1);
    char long_user[ID_MAX_LEN + 2];
    memset(long_user, 'u', sizeof long_user - 1);
    long_user[sizeof long_user - 1] = '\0';
    CHECK(claims_take(w, SPAN_LIT("u1"), SPAN_LIT(""), fp, waiter_done, NULL) == -1);
    CHECK(claims_take(w, span_of(long_user), SPAN_LIT("k"), fp, waiter_done, NULL) == -1);
    CHECK(claims_release(w, SPAN_LIT(""), SPAN_LIT("k"), fp) == -1);

    /* queued together: decided in their order, many in a transaction (batch_max 16), whatever the
     * batches turn out to be; the first of each key wins */
    enum { N = 48 };
    static waiter_t many[N];
    uint64_t batches_before = atomic_load(&writer_stats(w)->batches);
    for (int i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "m%d", i % 4);
        fp_of(fp, (uint8_t)(0x10 + i % 3));
        waiter_init(&many[i]);
        CHECK(claims_take(w, SPAN_LIT("u3"), span_of(key), fp, waiter_done, &many[i]) == 0);
    }
    for (int i = 0; i < N; i++) {
        int first = i % 4; /* the first claim of key m(i % 4), fingerprint 0x10 + first % 3 */
        int want = i % 3 == first % 3 ? CLAIM_TAKEN : CLAIM_MISMATCH;
        CHECK(waiter_wait(&many[i]) == want);
    }
    CHECK(atomic_load(&writer_stats(w)->batches) - batches_before < N);

    /* a keyed reaction write beside claims of the same user and key: the two are apart (the record
     * is the item's shard's, the claim the user's; here one store is both) */
    write_cmd_t cmd;
    waiter_t wr;
    react_init(&cmd, &wr, "i1", "u1", "k9", 0xa);
    waiter_t wc;
    waiter_init(&wc);
    fp_of(fp, 0xa);
    CHECK(claims_take(w, SPAN_LIT("u1"), SPAN_LIT("k9"), fp, waiter_done, &wc) == 0);
    CHECK(writer_submit(w, &cmd) == 0);
    CHECK(waiter_wait(&wc) == CLAIM_TAKEN);
    CHECK(waiter_wait(&wr) == 200);
    CHECK(!claims_release_due(&cmd));
    answer_free(&cmd.answer);
    CHECK(take(w, "u1", "k9", 0xb) == CLAIM_MISMATCH);
    bench_close(&b);
}

/* A keyed reaction write carrying its own claim (the user's shard is the item's): the claim is taken
 * in the write's transaction, and a key bound to another request refuses the write with 409. */
static int react_claimed(writer_t *w, const char *item, const char *user, const char *key, uint8_t byte, bool *held)
{
    write_cmd_t cmd;
    waiter_t wr;
    react_init(&cmd, &wr, item, user, key, byte);
    cmd.react.claim = true;
    if (writer_submit(w, &cmd) != 0)
        return -1;
    int status = waiter_wait(&wr);
    *held = cmd.react.claim_held;
    answer_free(&cmd.answer);
    return status;
}

static void test_claim_in_the_write(void)
{
    bench_t b = {0};
    CHECK(bench_open(&b, 60000));
    if (!b.writer)
        return;
    writer_t *w = b.writer;
    bool held = false;
    CHECK(react_claimed(w, "i1", "u1", "k1", 0xa, &held) == 200 && held);
    CHECK(take(w, "u1", "k1", 0xb) == CLAIM_MISMATCH); /* bound by the write's own transaction */
    CHECK(take(w, "u1", "k1", 0xa) == CLAIM_TAKEN);
    CHECK(react_claimed(w, "i1", "u1", "k1", 0xa, &held) == 200 && held); /* the retry: its answer */
    /* a key claimed for another request (on another item's shard): refused, nothing applied */
    CHECK(take(w, "u2", "k2", 0xb) == CLAIM_TAKEN);
    CHECK(react_claimed(w, "i2", "u2", "k2", 0xa, &held) == 409 && !held);
    store_read_t *snap;
    reaction_row_t row = {0};
    CHECK(store_read_begin(b.store, &snap) == STORE_OK);
    CHECK(store_read_row(snap, SPAN_LIT("i2"), SPAN_LIT("u2"), &row) == STORE_NOTFOUND || row.set == 0);
    store_read_end(snap);
    /* claims of the same key in one batch, queued together: the first wins, as for WRITE_CLAIM */
    enum { N = 12 };
    static waiter_t claims[N];
    uint8_t fp[FINGERPRINT_LEN];
    for (int i = 0; i < N; i++) {
        waiter_init(&claims[i]);
        fp_of(fp, (uint8_t)(0x20 + i % 2));
        CHECK(claims_take(w, SPAN_LIT("u3"), SPAN_LIT("k3"), fp, waiter_done, &claims[i]) == 0);
    }
    CHECK(react_claimed(w, "i3", "u3", "k3", 0x20, &held) == 200 && held);
    for (int i = 0; i < N; i++)
        CHECK(waiter_wait(&claims[i]) == (i % 2 ? CLAIM_MISMATCH : CLAIM_TAKEN));
    bench_close(&b);
}

/* Expired claims: replaced by the next take, then swept by the writer (sweep_max 2 a transaction). */
static void test_expiry(void)
{
    bench_t b = {0};
    CHECK(bench_open(&b, 300));
    if (!b.writer)
        return;
    writer_t *w = b.writer;
    CHECK(take(w, "u1", "k1", 0xa) == CLAIM_TAKEN);
    CHECK(take(w, "u1", "k1", 0xb) == CLAIM_MISMATCH);
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof key, "s%d", i);
        CHECK(take(w, "u2", key, 0xa) == CLAIM_TAKEN);
    }
    const struct timespec pause = {0, 350 * 1000000L};
    nanosleep(&pause, NULL);
    CHECK(take(w, "u1", "k1", 0xb) == CLAIM_TAKEN); /* the old one expired: replaced */
    /* the sweep runs once a second, and again at once while it finds its limit's worth: the five,
     * and u1/k1's new claim once it has expired too (no idempotency record is swept here) */
    uint64_t swept = 0;
    for (int i = 0; i < 80 && swept < 6; i++) {
        const struct timespec tick = {0, 50 * 1000000L};
        nanosleep(&tick, NULL);
        swept = atomic_load(&writer_stats(w)->swept);
    }
    CHECK(swept == 6);
    writer_stop(b.writer);
    b.writer = NULL;
    /* nothing is left to sweep, whatever the time */
    store_write_t *tx;
    size_t deleted = 99;
    CHECK(store_write_begin(b.store, &tx) == STORE_OK);
    CHECK(store_claims_sweep(tx, UINT64_MAX / 2, 100, &deleted) == STORE_OK && deleted == 0);
    CHECK(store_write_commit(tx) == STORE_OK);
    bench_close(&b);
}

static void test_release_due(void)
{
    write_cmd_t c = {.type = WRITE_REACT};
    struct {
        int status;
        bool replayed, maybe_applied, due;
    } cases[] = {
        {200, false, false, false}, {200, true, false, false}, {412, false, false, false},
        {409, false, false, true},  {409, true, false, false}, {403, false, false, true},
        {503, false, false, true},  {503, false, true, false}, {500, false, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.answer.status = cases[i].status;
        c.answer.replayed = cases[i].replayed;
        c.maybe_applied = cases[i].maybe_applied;
        CHECK(claims_release_due(&c) == cases[i].due);
    }
    answer_t a = {0};
    CHECK(answer_idem_mismatch(&a) == 0 && a.status == 409 && a.body &&
          strstr(a.body, "urn:tally:error:idempotency-key-mismatch") != NULL);
    answer_free(&a);
}

void test_key_claims(void)
{
    test_rules();
    test_claim_in_the_write();
    test_expiry();
    test_release_due();
}
