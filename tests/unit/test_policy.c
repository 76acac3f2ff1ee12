/* test_policy.c — item policies: targets, bodies, the check of a write, resolution (own id, else the
 * longest matching prefix, else `*`, else none), the hand-rendered member against jansson's dump, and
 * the engine's changes through a writer on an embedded store (the limit, a delete's 404, reloading). */
#include <stdlib.h>
#include <string.h>

#include "core/itemjson.h"
#include "core/policy.h"
#include "engine/features.h"
#include "engine/policies.h"
#include "engine/writer.h"
#include "unit.h"

static kinds_t one, many;

static int parse(const kinds_t *k, const char *text, policy_t *p)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    char err[160];
    int rc = policy_from_json(k, doc, p, err, sizeof err);
    json_decref(doc);
    return rc;
}

static void test_targets(void)
{
    policy_target_t t;
    CHECK(policy_target_parse(SPAN_LIT("*"), &t) == 0 && t == POLICY_TARGET_ALL);
    CHECK(policy_target_parse(SPAN_LIT("comment-*"), &t) == 0 && t == POLICY_TARGET_PREFIX);
    CHECK(policy_target_parse(SPAN_LIT(".*"), &t) == 0 && t == POLICY_TARGET_PREFIX);
    CHECK(policy_target_parse(SPAN_LIT("v1"), &t) == 0 && t == POLICY_TARGET_ITEM);
    static const char *const bad[] = {"", "**", "a*b", "a b*", "a/b", "..", ".", "*a", "a%2A"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(policy_target_parse(span_of(bad[i]), &t) != 0);
    char longest[ID_MAX_LEN + 2];
    memset(longest, 'x', sizeof longest);
    CHECK(policy_target_parse((span_t){longest, ID_MAX_LEN}, &t) == 0 && t == POLICY_TARGET_ITEM);
    CHECK(policy_target_parse((span_t){longest, ID_MAX_LEN + 1}, &t) != 0);
    longest[ID_MAX_LEN] = '*';
    CHECK(policy_target_parse((span_t){longest, ID_MAX_LEN + 1}, &t) == 0 && t == POLICY_TARGET_PREFIX);
    longest[ID_MAX_LEN + 1] = '*';
    longest[ID_MAX_LEN] = 'x';
    CHECK(policy_target_parse((span_t){longest, ID_MAX_LEN + 2}, &t) != 0);
}

static void test_bodies(void)
{
    policy_t p;
    CHECK(parse(&one, "{}", &p) == 0 && !p.kinds_given && !p.closed && !p.hidden && p.max_kinds == 0);
    CHECK(policy_allowed(&one, &p) == KINDSET_ALL(2));
    CHECK(parse(&one, "{\"kinds\":[\"dislike\"],\"closed\":true,\"counts\":\"hidden\",\"max_kinds\":16}", &p) == 0);
    CHECK(p.kinds_given && p.kinds == kindset_of(2) && p.closed && p.hidden && p.max_kinds == 16);
    static const char *const bad[] = {
        "{\"kinds\":[]}",          "{\"kinds\":[\"wow\"]}",
        "{\"kinds\":\"like\"}",    "{\"kinds\":[\"like\",\"like\"]}",
        "{\"kinds\":[\"none\"]}",  "{\"max_kinds\":0}",
        "{\"max_kinds\":17}",      "{\"max_kinds\":\"2\"}",
        "{\"max_kinds\":1.5}",     "{\"closed\":1}",
        "{\"counts\":\"secret\"}", "{\"counts\":null}",
        "{\"other\":1}",           "[]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse(&one, bad[i], &p) != 0);
    /* the stored form keeps "kinds" only when given; the shown one always lists them */
    CHECK(parse(&one, "{\"closed\":true}", &p) == 0);
    json_t *stored = policy_json(&one, &p, true), *shown = policy_json(&one, &p, false);
    char *a = json_dumps(stored, JSON_COMPACT), *b = json_dumps(shown, JSON_COMPACT);
    CHECK(a && strcmp(a, "{\"closed\":true,\"counts\":\"public\"}") == 0);
    CHECK(b && strcmp(b, "{\"kinds\":[\"like\",\"dislike\"],\"closed\":true,\"counts\":\"public\"}") == 0);
    free(a);
    free(b);
    json_decref(stored);
    json_decref(shown);
}

/* policy_append gives what jansson's compact dump of policy_json gives. */
static void test_rendering(void)
{
    static const char *const bodies[] = {"{}", "{\"kinds\":[\"haha\",\"like\"],\"max_kinds\":2}",
                                         "{\"closed\":true,\"counts\":\"hidden\"}"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        policy_t p;
        CHECK(parse(&many, bodies[i], &p) == 0);
        json_t *obj = policy_json(&many, &p, false);
        char *want = json_dumps(obj, JSON_COMPACT);
        textbuf_t b = {0};
        policy_append(&b, &many, &p);
        size_t len;
        char *got = textbuf_finish(&b, &len);
        CHECK(want && got && strcmp(want, got) == 0);
        free(want);
        free(got);
        json_decref(obj);
    }
    /* hidden counts: null for others, the counts for an admin; the viewer's own reaction either way */
    policy_t p = {.hidden = true};
    int64_t counts[KINDS_MAX + 1] = {3, 2, 1};
    reaction_row_t row = {kindset_of(1), 4};
    textbuf_t b = {0};
    itemjson_append_policy(&b, &many, SPAN_LIT("v1"), counts, &row, &p, false);
    size_t len;
    char *text = textbuf_finish(&b, &len);
    CHECK(text && strcmp(text, "{\"item\":\"v1\",\"counts\":null,\"reactors\":null,\"policy\":{\"kinds\":[\"like\","
                               "\"love\",\"haha\"],\"closed\":false,\"counts\":\"hidden\"},\"viewer\":{\"reactions\":["
                               "\"like\"],\"version\":4}}") == 0);
    free(text);
    b = (textbuf_t){0};
    itemjson_append_policy(&b, &one, SPAN_LIT("v1"), counts, NULL, &p, true);
    text = textbuf_finish(&b, &len);
    CHECK(text && strstr(text, "{\"item\":\"v1\",\"counts\":{\"like\":2,\"dislike\":1},\"policy\":") == text);
    free(text);
}

static void test_check(void)
{
    policy_t p;
    CHECK(policy_check(&one, NULL, 0, kindset_of(1)) == POLICY_OK);
    CHECK(parse(&one, "{\"closed\":true}", &p) == 0);
    CHECK(policy_check(&one, &p, 0, 0) == POLICY_CLOSED); /* even a write that changes nothing */
    CHECK(policy_check(&one, &p, kindset_of(1), 0) == POLICY_CLOSED);
    CHECK(parse(&one, "{\"kinds\":[\"like\"]}", &p) == 0);
    CHECK(policy_check(&one, &p, 0, kindset_of(1)) == POLICY_OK);
    CHECK(policy_check(&one, &p, 0, kindset_of(2)) == POLICY_NOT_ALLOWED);
    CHECK(policy_check(&one, &p, kindset_of(1), kindset_of(2)) == POLICY_NOT_ALLOWED); /* a switch adds */
    CHECK(policy_check(&one, &p, kindset_of(2), 0) == POLICY_OK);                      /* clearing */
    CHECK(policy_check(&one, &p, kindset_of(2), kindset_of(2)) == POLICY_OK);          /* nothing added */
    CHECK(parse(&many, "{\"kinds\":[\"like\",\"love\"],\"max_kinds\":1}", &p) == 0);
    kindset_t like = kindset_of(1), love = kindset_of(2), haha = kindset_of(3);
    CHECK(policy_check(&many, &p, like, like | love) == POLICY_TOO_MANY);
    CHECK(policy_check(&many, &p, like, like | haha) == POLICY_NOT_ALLOWED);      /* not allowed first */
    CHECK(policy_check(&many, &p, like | love | haha, like | love) == POLICY_OK); /* removing, though over */
    CHECK(policy_check(&many, &p, like | love, love) == POLICY_OK);
    CHECK(policy_check(&many, &p, like | haha, love) == POLICY_OK); /* a set within the bound */
    CHECK(strcmp(policy_verdict_code(POLICY_TOO_MANY), "too-many-reactions") == 0);
}

static policy_entry_t entry(const char *target, bool closed)
{
    policy_entry_t e = {.target_len = strlen(target), .policy = {.closed = closed, .max_kinds = 1}};
    memcpy(e.target, target, e.target_len);
    e.policy.max_kinds = (uint8_t)(e.target_len % 16 + 1); /* tells the entries apart */
    return e;
}

static void test_resolution(void)
{
    policy_table_t t;
    CHECK(policy_table_build(&t, NULL, 0) == 0 && policy_resolve(&t, SPAN_LIT("a")) == NULL);
    policy_table_free(&t);
    static const char *const targets[] = {"c-1", "c-*", "c-1-*", "*", "d*", "c-1-2", "c-10"};
    size_t n = sizeof targets / sizeof targets[0];
    policy_entry_t *es = malloc(n * sizeof *es);
    if (!es)
        return;
    for (size_t i = 0; i < n; i++)
        es[i] = entry(targets[i], false);
    CHECK(policy_table_build(&t, es, n) == 0);
    static const struct {
        const char *item, *want;
    } cases[] = {
        {"c-1", "c-1"}, {"c-10", "c-10"}, {"c-11", "c-*"}, {"c-1-2", "c-1-2"}, {"c-1-3", "c-1-*"}, {"c-1-", "c-1-*"},
        {"c-", "c-*"},  {"c", "*"},       {"d", "d*"},     {"dd", "d*"},       {"x", "*"},         {"c-1-22", "c-1-*"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const policy_t *p = policy_resolve(&t, span_of(cases[i].item));
        const policy_entry_t *e = policy_table_find(&t, span_of(cases[i].want));
        CHECK(p && e && p == &e->policy);
    }
    CHECK(policy_table_find(&t, SPAN_LIT("c-2")) == NULL);
    policy_table_free(&t);
    /* without `*`: nothing matches an item no prefix covers */
    es = malloc(sizeof *es);
    if (!es)
        return;
    es[0] = entry("c-*", true);
    CHECK(policy_table_build(&t, es, 1) == 0);
    CHECK(policy_resolve(&t, SPAN_LIT("x")) == NULL && policy_resolve(&t, SPAN_LIT("c-x"))->closed);
    policy_table_free(&t);
}

/* The engine: changes decided by a writer on an embedded store, the table in force after each, and
 * the limit from the counter record. */
static int change(writer_t *w, policies_t *pol, const char *target, const char *body, bool put)
{
    static policy_write_t pw;
    policy_t p = {0};
    if (put && parse(&one, body, &p) != 0)
        return -1;
    policy_write_init(&pw, pol, span_of(target), &p, put);
    int status = writer_call(w, &pw.cmd) == 0 ? pw.cmd.answer.status : -1;
    if (status >= 200 && status < 300)
        policies_changed(pol, &pw);
    policy_write_free(&pw);
    return status;
}

static void test_engine(void)
{
    char dir[] = "/tmp/tally-unit-pol-XXXXXX", err[256];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    store_options_t opt = {.map_size_bytes = 1ull << 26};
    store_t *s = NULL;
    CHECK(store_open(dir, &one, &opt, &s, err, sizeof err) == STORE_OK);
    if (!s)
        return;
    policies_t *pol = NULL;
    writer_t *w = NULL;
    writer_options_t wopt = {.queue_max = 64,
                             .batch_max = 16,
                             .fold_max = 1024,
                             .idem_ttl_ms = 60000,
                             .sweep_max = 16,
                             .log_retention_ms = 60000};
    CHECK(policies_open(s, &one, &pol, err, sizeof err) == 0);
    wopt.policies = pol;
    CHECK(pol && writer_start(s, &one, &wopt, &w) == 0);
    if (!pol || !w)
        return;
    features_t *feat = NULL; /* policies are used once the feature version allows them: this node registers */
    CHECK(features_open(s, w, false, &feat, err, sizeof err) == 0);
    policy_t got;
    CHECK(!policies_lookup(pol, SPAN_LIT("c-1"), &got));
    CHECK(change(w, pol, "c-*", "{\"closed\":true}", true) == 200);
    CHECK(policies_lookup(pol, SPAN_LIT("c-1"), &got) && got.closed);
    CHECK(change(w, pol, "c-1", "{\"kinds\":[\"like\"]}", true) == 200);
    CHECK(policies_lookup(pol, SPAN_LIT("c-1"), &got) && !got.closed && got.kinds == kindset_of(1));
    CHECK(change(w, pol, "c-2", NULL, false) == 404);
    CHECK(change(w, pol, "c-1", NULL, false) == 204);
    CHECK(policies_lookup(pol, SPAN_LIT("c-1"), &got) && got.closed);
    CHECK(atomic_load(&policies_stats(pol)->count) == 1);
    /* the limit counts what the counter record says: at POLICY_MAX a new target is refused, an existing
     * one may be replaced */
    store_write_t *tx;
    CHECK(store_write_begin(s, &tx) == STORE_OK);
    char counter[48];
    snprintf(counter, sizeof counter, "%d %d", 1000, POLICY_MAX);
    CHECK(store_aux_put(tx, SPAN_LIT("policy/c"), span_of(counter)) == STORE_OK);
    CHECK(store_write_commit(tx) == STORE_OK);
    CHECK(change(w, pol, "c-3", "{}", true) == 400);
    CHECK(change(w, pol, "c-*", "{}", true) == 200);
    CHECK(policies_lookup(pol, SPAN_LIT("c-1"), &got) && !got.closed);
    /* a new node (a restart) loads what the store keeps */
    policies_t *again = NULL;
    CHECK(policies_open(s, &one, &again, err, sizeof err) == 0);
    CHECK(again && policies_lookup(again, SPAN_LIT("c-9"), &got) && !got.closed &&
          !policies_lookup(again, SPAN_LIT("d"), &got));
    policies_close(again);
    features_close(feat);
    writer_stop(w);
    policies_close(pol);
    store_close(s);
    snprintf(err, sizeof err, "rm -rf '%s'", dir);
    if (system(err) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

void test_policy(void)
{
    char err[128];
    kinds_parse(&one, "like,dislike", err, sizeof err);
    kinds_parse(&many, "like,love,haha", err, sizeof err);
    many.mode = REACTION_MODE_MANY;
    test_targets();
    test_bodies();
    test_rendering();
    test_check();
    test_resolution();
    test_engine();
}
