/* test_features.c — the feature version: the rule (which version is in force given the nodes seen),
 * the version a store without a record starts at, node records, and the engine on an embedded store
 * (a fresh store reaches this build's version at once; a store already past it refuses the process;
 * a gated write is refused while the version in force is below its feature's, and writes nothing). */
#include <stdlib.h>
#include <string.h>

#include "engine/features.h"
#include "engine/policies.h"
#include "engine/writer.h"
#include "unit.h"

#define NOW 1000000000ull

static void test_rule(void)
{
    const uint64_t alive = FEATURES_ALIVE_MS;
    /* one node: the version rises to what it supports */
    feature_node_t one[] = {{2, NOW}};
    CHECK(features_rule(1, one, 1, NOW, alive) == 2);
    /* an alive node that supports less holds it back; never lowered */
    feature_node_t two[] = {{2, NOW}, {1, NOW - 1000}};
    CHECK(features_rule(1, two, 2, NOW, alive) == 1);
    CHECK(features_rule(2, two, 2, NOW, alive) == 2);
    /* seen exactly at the bound still counts; past it, it does not */
    two[1].seen_ms = NOW - alive;
    CHECK(features_rule(1, two, 2, NOW, alive) == 1);
    two[1].seen_ms = NOW - alive - 1;
    CHECK(features_rule(1, two, 2, NOW, alive) == 2);
    /* a clock ahead counts as seen now */
    two[1].seen_ms = NOW + 60000;
    CHECK(features_rule(1, two, 2, NOW, alive) == 1);
    /* the lowest of many; a newer node alone does not raise past the others */
    feature_node_t many[] = {{3, NOW}, {4, NOW}, {3, NOW - 10}, {9, NOW - alive - 5}};
    CHECK(features_rule(1, many, 4, NOW, alive) == 3);
    CHECK(features_rule(5, many, 4, NOW, alive) == 5);
    /* nobody alive: unchanged */
    feature_node_t gone[] = {{3, NOW - alive - 1}};
    CHECK(features_rule(1, gone, 1, NOW, alive) == 1);
    CHECK(features_rule(2, NULL, 0, NOW, alive) == 2);
    /* who may raise: anyone alone; else only after a bound of heartbeats without a failure */
    CHECK(features_may_raise(false, 0, alive));
    CHECK(!features_may_raise(true, 0, alive));
    CHECK(!features_may_raise(true, alive - 1, alive));
    CHECK(features_may_raise(true, alive, alive));
    /* where no version is stored */
    CHECK(features_initial(false) == FEATURE_VERSION_BASE);
    CHECK(features_initial(true) == FEATURE_VERSION_POLICIES_VOIDS);
    CHECK(FEATURE_VERSION_SUPPORTED >= FEATURE_VERSION_POLICIES_VOIDS);
    /* records */
    feature_node_t n;
    CHECK(features_parse_node(SPAN_LIT("2 1700000000123"), &n) == 0 && n.supported == 2 && n.seen_ms == 1700000000123);
    CHECK(features_parse_node(SPAN_LIT("0 5"), &n) != 0);
    CHECK(features_parse_node(SPAN_LIT("2"), &n) != 0);
    CHECK(features_parse_node(SPAN_LIT("2 5 x"), &n) != 0);
    CHECK(features_parse_node(SPAN_LIT(""), &n) != 0);
}

static int put_version(store_t *s, const char *value)
{
    store_write_t *tx;
    if (store_write_begin(s, &tx) != STORE_OK)
        return -1;
    if (store_aux_put(tx, SPAN_LIT(FEATURES_VERSION_KEY), span_of(value)) != STORE_OK) {
        store_write_abort(tx);
        return -1;
    }
    return store_write_commit(tx) == STORE_OK ? 0 : -1;
}

typedef struct {
    char version[32];
    size_t policies, nodes;
} seen_t;

static int seen_one(void *arg, span_t key, span_t value)
{
    seen_t *s = arg;
    if (span_eq_str(key, FEATURES_VERSION_KEY))
        snprintf(s->version, sizeof s->version, "%.*s", (int)value.len, value.ptr);
    else if (key.len > strlen(FEATURES_NODE_PREFIX) && memcmp(key.ptr, FEATURES_NODE_PREFIX, 10) == 0)
        s->nodes++;
    else if (key.len > 9 && memcmp(key.ptr, "policy/p/", 9) == 0)
        s->policies++;
    return 0;
}

static seen_t seen(store_t *s)
{
    seen_t out = {"", 0, 0};
    store_read_t *r;
    if (store_read_begin(s, &r) == STORE_OK) {
        store_read_aux(r, SPAN_LIT(""), seen_one, &out);
        store_read_end(r);
    }
    return out;
}

static int put_policy(writer_t *w, policies_t *pol)
{
    static policy_write_t pw;
    policy_t p = {.closed = true};
    policy_write_init(&pw, pol, SPAN_LIT("c-*"), &p, true);
    int status = writer_call(w, &pw.cmd) == 0 ? pw.cmd.answer.status : -1;
    if (status >= 200 && status < 300)
        policies_changed(pol, &pw);
    policy_write_free(&pw);
    return status;
}

static void test_engine(void)
{
    static kinds_t kinds;
    char err[256], dir[] = "/tmp/tally-unit-feat-XXXXXX";
    kinds_parse(&kinds, "like,dislike", err, sizeof err);
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    store_options_t opt = {.map_size_bytes = 1ull << 26};
    store_t *s = NULL;
    CHECK(store_open(dir, &kinds, &opt, &s, err, sizeof err) == STORE_OK);
    if (!s)
        return;
    writer_options_t wopt = {.queue_max = 64,
                             .batch_max = 16,
                             .fold_max = 1024,
                             .idem_ttl_ms = 60000,
                             .sweep_max = 16,
                             .log_retention_ms = 60000};
    policies_t *pol = NULL;
    writer_t *w = NULL;
    CHECK(policies_open(s, &kinds, &pol, err, sizeof err) == 0);
    wopt.policies = pol;
    CHECK(pol && writer_start(s, &kinds, &wopt, &w) == 0);
    if (!pol || !w)
        return;
    /* no version stored and nothing used: the base, so a gated write is refused and writes nothing */
    CHECK(put_policy(w, pol) == 409);
    CHECK(seen(s).policies == 0);
    /* the version held back by hand (as a node that supports less would): still refused */
    CHECK(put_version(s, "1") == 0);
    CHECK(put_policy(w, pol) == 409);
    /* this process registers: the only node, so the version rises to what it supports at once */
    features_t *f = NULL;
    CHECK(features_open(s, w, false, &f, err, sizeof err) == 0 && f);
    seen_t now = seen(s);
    char want[16];
    snprintf(want, sizeof want, "%d", FEATURE_VERSION_SUPPORTED);
    CHECK(strcmp(now.version, want) == 0 && now.nodes == 1);
    CHECK(f && atomic_load(&features_stats(f)->in_force) == FEATURE_VERSION_SUPPORTED);
    CHECK(put_policy(w, pol) == 200 && seen(s).policies == 1);
    features_close(f);
    /* another start: the earlier run's record is replaced, not kept (one node on this store) */
    f = NULL;
    CHECK(features_open(s, w, false, &f, err, sizeof err) == 0);
    CHECK(seen(s).nodes == 1);
    features_close(f);
    /* a store used by a newer build: refused, naming both versions; nothing lowered */
    snprintf(want, sizeof want, "%d", FEATURE_VERSION_SUPPORTED + 1);
    CHECK(put_version(s, want) == 0);
    f = NULL;
    err[0] = '\0';
    CHECK(features_open(s, w, false, &f, err, sizeof err) != 0 && !f);
    char both[64];
    snprintf(both, sizeof both, "is %d and this build supports %d", FEATURE_VERSION_SUPPORTED + 1,
             FEATURE_VERSION_SUPPORTED);
    CHECK(strstr(err, both) != NULL);
    CHECK(strcmp(seen(s).version, want) == 0);
    /* one this build cannot read: refused too, and left as it is */
    CHECK(put_version(s, "3.1") == 0);
    f = NULL;
    CHECK(features_open(s, w, false, &f, err, sizeof err) != 0 && !f && strstr(err, "cannot be read") != NULL);
    CHECK(strcmp(seen(s).version, "3.1") == 0);
    writer_stop(w);
    policies_close(pol);
    store_close(s);
    snprintf(err, sizeof err, "rm -rf '%s'", dir);
    if (system(err) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

void test_features(void)
{
    test_rule();
    test_engine();
}
