/* test_core.c — ids, kinds, the delta table, parsers, fingerprints and answers. */
#include <stdlib.h>
#include <string.h>

#include "core/answer.h"
#include "core/fingerprint.h"
#include "core/ids.h"
#include "core/kinds.h"
#include "core/parse.h"
#include "core/reaction.h"
#include "unit.h"

void test_ids(void)
{
    char long_id[ID_MAX_LEN + 2];
    memset(long_id, 'a', sizeof long_id);
    CHECK(id_valid(SPAN_LIT("v1")));
    CHECK(id_valid(SPAN_LIT("A-z_0.9:~x")));
    CHECK(id_valid((span_t){long_id, ID_MAX_LEN}));
    CHECK(!id_valid((span_t){long_id, ID_MAX_LEN + 1}));
    CHECK(!id_valid(SPAN_LIT("")));
    CHECK(!id_valid(SPAN_LIT(".")));
    CHECK(!id_valid(SPAN_LIT("..")));
    CHECK(id_valid(SPAN_LIT("...")));
    CHECK(!id_valid(SPAN_LIT("a%20b")));
    CHECK(!id_valid(SPAN_LIT("a/b")));
    CHECK(!id_valid(SPAN_LIT("a b")));
    CHECK(!id_valid((span_t){"a\0b", 3}));
    CHECK(!id_valid(SPAN_LIT("caf\xc3\xa9")));
}

void test_kinds(void)
{
    kinds_t k;
    char err[128];
    CHECK(kinds_parse(&k, "like,dislike", err, sizeof err) == 0);
    CHECK(k.count == 2 && strcmp(kinds_name(&k, 1), "like") == 0 && strcmp(kinds_name(&k, 0), "none") == 0);
    CHECK(kinds_find(&k, SPAN_LIT("dislike"), false) == 2);
    CHECK(kinds_find(&k, SPAN_LIT("none"), true) == KIND_NONE);
    CHECK(kinds_find(&k, SPAN_LIT("none"), false) == -1);
    CHECK(kinds_find(&k, SPAN_LIT("love"), true) == -1);
    CHECK(kinds_find(&k, SPAN_LIT("lik"), true) == -1);
    CHECK(kinds_parse(&k, "like,love,haha,wow,sad,angry", err, sizeof err) == 0 && k.count == 6);
    CHECK(kinds_parse(&k, "Like", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "none", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "reaction", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "like,reactions", err, sizeof err) != 0); /* a list route and a member name */
    CHECK(kinds_parse(&k, "a,a", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "a,", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", err, sizeof err) == 0 && k.count == 16);
    CHECK(kinds_parse(&k, "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", err, sizeof err) != 0);
    CHECK(kinds_parse(&k, "abcdefghijabcdefghijabcdefghij12", err, sizeof err) == 0);
    CHECK(kinds_parse(&k, "abcdefghijabcdefghijabcdefghij123", err, sizeof err) != 0);
}

/* Applies from→to to counts and checks each kind moved by its membership alone, and the reactors by
 * emptiness alone. */
static void check_delta(kindset_t from, kindset_t to, int kinds)
{
    int64_t d[KINDS_MAX + 1] = {0};
    reaction_deltas_add(from, to, d);
    for (int k = 1; k <= kinds; k++)
        CHECK(d[k] == (int64_t)kindset_has(to, k) - (int64_t)kindset_has(from, k));
    CHECK(d[0] == (int64_t)(to != 0) - (int64_t)(from != 0));
}

void test_reaction(void)
{
    /* The seed's table: none→like (+1,0), like→dislike (-1,+1), dislike→none (0,-1). */
    kindset_t none = KINDSET_EMPTY, like = kindset_of(1), dislike = kindset_of(2), love = kindset_of(3);
    int64_t d[KINDS_MAX + 1] = {0};
    reaction_deltas_add(none, like, d);
    CHECK(d[1] == 1 && d[2] == 0 && d[0] == 1);
    reaction_deltas_add(like, dislike, d);
    CHECK(d[1] == 0 && d[2] == 1 && d[0] == 1);
    reaction_deltas_add(dislike, none, d);
    CHECK(d[1] == 0 && d[2] == 0 && d[0] == 0);
    /* Sets: {like} → {like, love} → {love} → {}: each kind that leaves −1, each that joins +1. */
    memset(d, 0, sizeof d);
    reaction_deltas_add(like, like | love, d);
    CHECK(d[1] == 0 && d[3] == 1 && d[0] == 0);
    reaction_deltas_add(like | love, love, d);
    CHECK(d[1] == -1 && d[3] == 1 && d[0] == 0);
    reaction_deltas_add(love, none, d);
    CHECK(d[1] == -1 && d[3] == 0 && d[0] == -1);
    for (int from = 0; from <= KINDS_MAX; from++)
        for (int to = 0; to <= KINDS_MAX; to++)
            check_delta(kindset_of(from), kindset_of(to), KINDS_MAX);
    for (kindset_t from = 0; from < (1u << 5); from += 2) /* every pair of sets of four kinds */
        for (kindset_t to = 0; to < (1u << 5); to += 2)
            check_delta(from, to, 4);
    /* A log entry's delta by its counted bits: minus from if it counted before, plus to if after. */
    transition_t t = {.from = like | love, .to = like | love, .uncounted = TRANSITION_UNCOUNTED_AFTER};
    memset(d, 0, sizeof d);
    CHECK(transition_well_formed(&t));
    transition_deltas_add(&t, d); /* a void */
    CHECK(d[1] == -1 && d[3] == -1 && d[0] == -1);
    t.uncounted = TRANSITION_UNCOUNTED_BEFORE; /* a restore */
    transition_deltas_add(&t, d);
    CHECK(d[1] == 0 && d[3] == 0 && d[0] == 0);
    t.to = dislike;
    t.uncounted = TRANSITION_UNCOUNTED_BOTH; /* a voided user's write: moves nothing */
    CHECK(transition_well_formed(&t));
    transition_deltas_add(&t, d);
    CHECK(d[1] == 0 && d[2] == 0 && d[3] == 0 && d[0] == 0);
    t.uncounted = 0;
    transition_deltas_add(&t, d);
    CHECK(d[1] == -1 && d[2] == 1 && d[3] == -1 && d[0] == 0);
    /* not well formed: a change counted on one side only, a non-change counted alike on both */
    t.uncounted = TRANSITION_UNCOUNTED_AFTER;
    CHECK(!transition_well_formed(&t));
    t.to = t.from;
    t.uncounted = 0;
    CHECK(!transition_well_formed(&t));
    t.uncounted = TRANSITION_UNCOUNTED_BOTH;
    CHECK(!transition_well_formed(&t));
    /* The stored version keeps the bits above every version a row reaches; old entries read counted. */
    t.version = TRANSITION_VERSION_MASK;
    t.uncounted = TRANSITION_UNCOUNTED_AFTER;
    transition_t back = {0};
    CHECK(transition_version_unpack(&back, transition_version_pack(&t)) && back.version == t.version &&
          back.uncounted == TRANSITION_UNCOUNTED_AFTER);
    CHECK(transition_version_unpack(&back, 77) && back.version == 77 && back.uncounted == 0);
    CHECK(!transition_version_unpack(&back, UINT64_C(1) << 63)); /* bits no writer sets */
    /* One mode: a set of at most one kind, replaced rather than joined. */
    reaction_mode_t one = REACTION_MODE_ONE, many = REACTION_MODE_MANY;
    CHECK(reaction_target(one, REACT_SET, dislike, like) == dislike);
    CHECK(reaction_target(one, REACT_SET, none, like) == none);
    CHECK(reaction_target(one, REACT_ADD, dislike, like) == dislike);
    CHECK(reaction_target(one, REACT_REMOVE, like, like) == none);
    CHECK(reaction_target(one, REACT_REMOVE, like, dislike) == dislike);
    CHECK(reaction_target(one, REACT_REMOVE, like, none) == none);
    CHECK(reaction_target(one, REACT_TOGGLE, like, like) == none);
    CHECK(reaction_target(one, REACT_TOGGLE, like, dislike) == like);
    CHECK(reaction_target(one, REACT_TOGGLE, like, none) == like);
    /* Many mode: kinds join and leave one by one; SET replaces the whole set. */
    CHECK(reaction_target(many, REACT_ADD, love, like) == (like | love));
    CHECK(reaction_target(many, REACT_ADD, like, like) == like);
    CHECK(reaction_target(many, REACT_REMOVE, like, like | love) == love);
    CHECK(reaction_target(many, REACT_REMOVE, dislike, like | love) == (like | love));
    CHECK(reaction_target(many, REACT_TOGGLE, love, like) == (like | love));
    CHECK(reaction_target(many, REACT_TOGGLE, love, like | love) == like);
    CHECK(reaction_target(many, REACT_SET, dislike | love, like) == (dislike | love));
    CHECK(reaction_target(many, REACT_SET, none, like | love) == none);
    CHECK(kindset_single(like) == 1 && kindset_single(none) == KIND_NONE && kindset_size(like | love) == 2);
}

void test_parse(void)
{
    uint64_t v;
    CHECK(parse_duration_ms("90s", &v) == 0 && v == 90000);
    CHECK(parse_duration_ms("15m", &v) == 0 && v == 900000);
    CHECK(parse_duration_ms("24h", &v) == 0 && v == 86400000);
    CHECK(parse_duration_ms("250ms", &v) == 0 && v == 250);
    CHECK(parse_duration_ms("7d", &v) == 0 && v == 7 * 86400000ull);
    CHECK(parse_duration_ms("0", &v) == 0 && v == 0);
    CHECK(parse_duration_ms("366d", &v) != 0);
    CHECK(parse_duration_ms("90", &v) != 0);
    CHECK(parse_duration_ms("s", &v) != 0);
    CHECK(parse_duration_ms("-5s", &v) != 0);
    CHECK(parse_duration_ms("1.5h", &v) != 0);
    CHECK(parse_duration_ms("99999999999999999999999s", &v) != 0);
    CHECK(parse_size_bytes("256G", &v) == 0 && v == 256ull << 30);
    CHECK(parse_size_bytes("64MiB", &v) == 0 && v == 64ull << 20);
    CHECK(parse_size_bytes("4096", &v) == 0 && v == 4096);
    CHECK(parse_size_bytes("99999999T", &v) != 0);
    CHECK(parse_size_bytes("G", &v) != 0);
    CHECK(parse_size_bytes("1B", &v) == 0 && v == 1);
    CHECK(parse_size_bytes("10B", &v) == 0 && v == 10);
    CHECK(parse_size_bytes("10iB", &v) != 0); /* found by fuzz_parse */
    CHECK(parse_size_bytes("4GiB", &v) == 0 && v == 4ull << 30);

    char host[LISTEN_HOST_MAX + 1];
    uint16_t port;
    CHECK(parse_listen("127.0.0.1:8080", host, &port) == 0 && strcmp(host, "127.0.0.1") == 0 && port == 8080);
    CHECK(parse_listen("[::1]:0", host, &port) == 0 && strcmp(host, "::1") == 0 && port == 0);
    CHECK(parse_listen("::1:80", host, &port) != 0);
    CHECK(parse_listen("localhost:65536", host, &port) != 0);
    CHECK(parse_listen(":80", host, &port) != 0);
    CHECK(parse_listen("localhost", host, &port) != 0);

    char key[IDEM_KEY_MAX + 1];
    CHECK(parse_idempotency_key(SPAN_LIT("abc"), key) == 3 && strcmp(key, "abc") == 0);
    CHECK(parse_idempotency_key(SPAN_LIT("\"abc\""), key) == 3 && strcmp(key, "abc") == 0);
    CHECK(parse_idempotency_key(SPAN_LIT("\"a\\\"b\""), key) == 3 && strcmp(key, "a\"b") == 0);
    CHECK(parse_idempotency_key(SPAN_LIT("\"\""), key) < 0);
    CHECK(parse_idempotency_key(SPAN_LIT(""), key) < 0);
    CHECK(parse_idempotency_key(SPAN_LIT("\"abc"), key) < 0);
    CHECK(parse_idempotency_key(SPAN_LIT("\"a\\x\""), key) < 0);
    CHECK(parse_idempotency_key(SPAN_LIT("a\tb"), key) < 0);
    CHECK(parse_idempotency_key(SPAN_LIT("caf\xc3\xa9"), key) < 0);
    char long_key[300];
    memset(long_key, 'k', sizeof long_key);
    CHECK(parse_idempotency_key((span_t){long_key, 255}, key) == 255);
    CHECK(parse_idempotency_key((span_t){long_key, 256}, key) < 0);
    long_key[0] = '"';
    long_key[256] = '"';
    CHECK(parse_idempotency_key((span_t){long_key, 257}, key) == 255);
    long_key[257] = '"';
    long_key[256] = 'k';
    CHECK(parse_idempotency_key((span_t){long_key, 258}, key) < 0);

    if_match_t m;
    CHECK(parse_if_match(SPAN_LIT("\"3\""), &m) == 0 && m.count == 1 && m.versions[0] == 3);
    CHECK(if_match_holds(&m, 3) && !if_match_holds(&m, 4));
    CHECK(parse_if_match(SPAN_LIT("\"0\""), &m) == 0 && if_match_holds(&m, 0) && !if_match_holds(&m, 1));
    CHECK(parse_if_match(SPAN_LIT("\"1\", \"2\""), &m) == 0 && m.count == 2 && if_match_holds(&m, 2));
    CHECK(parse_if_match(SPAN_LIT("*"), &m) == 0 && if_match_holds(&m, 5) && !if_match_holds(&m, 0));
    CHECK(parse_if_match(SPAN_LIT("W/\"3\""), &m) != 0);
    CHECK(parse_if_match(SPAN_LIT("3"), &m) != 0);
    CHECK(parse_if_match(SPAN_LIT("\"\""), &m) != 0);
    CHECK(parse_if_match(SPAN_LIT("\"x\""), &m) != 0);
    CHECK(parse_if_match(SPAN_LIT(""), &m) != 0);
    CHECK(parse_if_match(SPAN_LIT("\"1\","), &m) != 0);

    span_t list = SPAN_LIT("a,,b"), e;
    size_t pos = 0;
    CHECK(parse_list_next(list, &pos, &e) && span_eq_str(e, "a"));
    CHECK(parse_list_next(list, &pos, &e) && e.len == 0);
    CHECK(parse_list_next(list, &pos, &e) && span_eq_str(e, "b"));
    CHECK(!parse_list_next(list, &pos, &e));

    span_t q = SPAN_LIT("x=1&ids=a,b&idsx=2"), val;
    CHECK(parse_query_param(q, "ids", &val) && span_eq_str(val, "a,b"));
    CHECK(parse_query_param(q, "x", &val) && span_eq_str(val, "1"));
    CHECK(!parse_query_param(q, "id", &val));
    CHECK(parse_query_param(SPAN_LIT("ids"), "ids", &val) && val.len == 0);
    CHECK(!parse_query_param(SPAN_LIT(""), "ids", &val));

    CHECK(parse_uint(SPAN_LIT("18446744073709551615"), UINT64_MAX, &v) == 0 && v == UINT64_MAX);
    CHECK(parse_uint(SPAN_LIT("18446744073709551616"), UINT64_MAX, &v) != 0);
    CHECK(parse_uint(SPAN_LIT("+1"), 10, &v) != 0);
    CHECK(parse_uint(SPAN_LIT("64"), 0, &v) != 0); /* found by fuzz_parse: max below a digit */
    CHECK(parse_uint(SPAN_LIT("5"), 4, &v) != 0 && parse_uint(SPAN_LIT("4"), 4, &v) == 0);
}

void test_fingerprint(void)
{
    uint8_t a[FINGERPRINT_LEN], b[FINGERPRINT_LEN];
    CHECK(fingerprint_request(SPAN_LIT("PUT"), SPAN_LIT("/v1/items/a/like"), SPAN_LIT(""), a) == 0);
    CHECK(fingerprint_request(SPAN_LIT("PUT"), SPAN_LIT("/v1/items/a/like"), SPAN_LIT(""), b) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* Moving bytes between parts changes the fingerprint (the parts are length-prefixed). */
    CHECK(fingerprint_request(SPAN_LIT("PUT"), SPAN_LIT("/v1/items/a/lik"), SPAN_LIT("e"), b) == 0);
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK(fingerprint_request(SPAN_LIT("DELETE"), SPAN_LIT("/v1/items/a/like"), SPAN_LIT(""), b) == 0);
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK(fingerprint_request(SPAN_LIT("PUT"), SPAN_LIT("/v1/items/a/like"), SPAN_LIT(" "), b) == 0);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

void test_answer(void)
{
    kinds_t k;
    char err[64];
    kinds_parse(&k, "like,dislike", err, sizeof err);
    answer_t a = {0};
    CHECK(answer_write_result(&a, &k, SPAN_LIT("v1"), kindset_of(2), kindset_of(1), 8, true) == 0);
    const char want[] =
        "{\"item\":\"v1\",\"reaction\":\"dislike\",\"previous\":\"like\",\"version\":8,\"changed\":true}";
    CHECK(a.status == 200 && a.has_etag && a.etag_version == 8);
    CHECK(a.body_len == strlen(want) && memcmp(a.body, want, a.body_len) == 0);
    CHECK(answer_problem(&a, 409, "idempotency-key-mismatch", "d") == 0);
    CHECK(a.status == 409 && a.type == ANSWER_PROBLEM && !a.has_etag);
    CHECK(strstr(a.body, "\"type\":\"urn:tally:error:idempotency-key-mismatch\"") != NULL);
    CHECK(strstr(a.body, "\"status\":409") != NULL);
    CHECK(answer_version_mismatch(&a, &k, kindset_of(1), 3) == 0);
    CHECK(a.status == 412 && strstr(a.body, "\"reaction\":\"like\"") && strstr(a.body, "\"version\":3"));
    /* many mode: arrays in the configured order, under "reactions" */
    k.mode = REACTION_MODE_MANY;
    CHECK(answer_write_result(&a, &k, SPAN_LIT("v1"), kindset_of(2) | kindset_of(1), kindset_of(1), 5, true) == 0);
    const char want_many[] =
        "{\"item\":\"v1\",\"reactions\":[\"like\",\"dislike\"],\"previous\":[\"like\"],\"version\":5,\"changed\":true}";
    CHECK(a.body_len == strlen(want_many) && memcmp(a.body, want_many, a.body_len) == 0);
    CHECK(answer_version_mismatch(&a, &k, KINDSET_EMPTY, 3) == 0);
    CHECK(a.status == 412 && strstr(a.body, "\"reactions\":[]") && strstr(a.body, "\"version\":3"));
    answer_free(&a);
}
