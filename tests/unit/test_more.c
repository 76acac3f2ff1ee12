/* test_more.c — JWT, the item map, the histogram and the pair filter. */
#include <stdio.h>
#include <string.h>

#include "core/histogram.h"
#include "core/itemmap.h"
#include "core/jwt.h"
#include "core/pairfilter.h"
#include "core/ratelimit.h"
#include "unit.h"

void test_jwt(void)
{
    char token[JWT_MAX_LEN];
    span_t secret = SPAN_LIT("s3cret"), other = SPAN_LIT("other");
    jwt_claims_t c;
    const char *why;
    int n = jwt_sign("bob", false, 2000, secret, token, sizeof token);
    CHECK(n > 0 && strchr(token, '=') == NULL);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &secret, 1, 1000, &c, &why) == 0);
    CHECK(strcmp(c.sub, "bob") == 0 && !c.admin && c.exp == 2000);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &other, 1, 1000, &c, &why) != 0);
    span_t both[2] = {other, secret}; /* rotation: any listed secret verifies */
    CHECK(jwt_verify((span_t){token, (size_t)n}, both, 2, 1000, &c, &why) == 0);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &secret, 1, 2000, &c, &why) != 0); /* expired */
    n = jwt_sign("ops", true, 2000, secret, token, sizeof token);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &secret, 1, 1000, &c, &why) == 0 && c.admin);
    /* A flipped signature byte, a truncated token, alg none, and junk are refused. */
    char bad[JWT_MAX_LEN];
    memcpy(bad, token, (size_t)n);
    bad[n - 2] = bad[n - 2] == 'A' ? 'B' : 'A';
    CHECK(jwt_verify((span_t){bad, (size_t)n}, &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify((span_t){token, (size_t)n - 1}, &secret, 1, 1000, &c, &why) != 0);
    const char none[] = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IiLCJleHAiOjk5OTk5OTk5OTl9.";
    CHECK(jwt_verify(SPAN_LIT(none), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT("a.b.c"), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT("a.b"), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT("a.b.c.d"), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT(""), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_sign("not a valid id", false, 2000, secret, token, sizeof token) > 0);
    CHECK(jwt_verify(span_of(token), &secret, 1, 1000, &c, &why) != 0); /* sub must be a valid user id */

    /* The signature's last character carries 2 unused bits (43 characters for 32 bytes): a lax
     * decoder maps four characters to the same bytes, so the token could be changed and still
     * verify. Only the canonical one (unused bits zero) is taken; and no padding, no whitespace. */
    n = jwt_sign("bob", false, 2000, secret, token, sizeof token);
    memcpy(bad, token, (size_t)n);
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int last = (int)(strchr(alphabet, token[n - 1]) - alphabet);
    CHECK((last & 3) == 0); /* jwt_sign writes the canonical form */
    for (int low = 1; low < 4; low++) {
        bad[n - 1] = alphabet[last | low];
        CHECK(jwt_verify((span_t){bad, (size_t)n}, &secret, 1, 1000, &c, &why) != 0);
    }
    bad[n - 1] = token[n - 1];
    CHECK(jwt_verify((span_t){bad, (size_t)n}, &secret, 1, 1000, &c, &why) == 0);
    bad[n] = '=';
    CHECK(jwt_verify((span_t){bad, (size_t)n + 1}, &secret, 1, 1000, &c, &why) != 0);
    bad[n] = ' ';
    CHECK(jwt_verify((span_t){bad, (size_t)n + 1}, &secret, 1, 1000, &c, &why) != 0);
    bad[n] = '\n';
    CHECK(jwt_verify((span_t){bad, (size_t)n + 1}, &secret, 1, 1000, &c, &why) != 0);

    span_t s[JWT_SECRETS_MAX];
    char err[256];
#define K32 "0123456789abcdef0123456789abcdef" /* 32 bytes: the shortest secret taken */
    CHECK(jwt_secrets_parse(SPAN_LIT(K32 "\n"), s, err, sizeof err) == 1 && span_eq_str(s[0], K32));
    CHECK(jwt_secrets_parse(SPAN_LIT("new" K32 "\nold" K32 "\n"), s, err, sizeof err) == 2 &&
          span_eq_str(s[1], "old" K32));
    CHECK(jwt_secrets_parse(SPAN_LIT("a" K32 "\n\nb" K32), s, err, sizeof err) == 2);
    /* \r\n line ends (a file written on Windows) */
    CHECK(jwt_secrets_parse(SPAN_LIT("a" K32 "\r\nb" K32 "\r\n"), s, err, sizeof err) == 2 &&
          span_eq_str(s[0], "a" K32) && span_eq_str(s[1], "b" K32));
    CHECK(jwt_secrets_parse(SPAN_LIT("\n"), s, err, sizeof err) == -1 && strstr(err, "no JWT secret"));
    CHECK(jwt_secrets_parse(SPAN_LIT(""), s, err, sizeof err) == -1);
    CHECK(jwt_secrets_parse(SPAN_LIT("\r\n"), s, err, sizeof err) == -1);
    CHECK(jwt_secrets_parse(SPAN_LIT(K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32), s,
                            err, sizeof err) == -1 &&
          strstr(err, "at most"));
    /* RFC 7518 §3.2: at least 256 bits; a weak line anywhere refuses the whole set */
    CHECK(jwt_secrets_parse(SPAN_LIT("a"), s, err, sizeof err) == -1 && strstr(err, "at least 32"));
    CHECK(jwt_secrets_parse(SPAN_LIT(" "), s, err, sizeof err) == -1 && strstr(err, "line 1"));
    CHECK(jwt_secrets_parse(SPAN_LIT("0123456789abcdef0123456789abcde\r\n"), s, err, sizeof err) == -1);
    CHECK(jwt_secrets_parse(SPAN_LIT(K32 "\nshort\n"), s, err, sizeof err) == -1 && strstr(err, "line 2"));
#undef K32
}

void test_itemmap(void)
{
    itemmap_t m = {0};
    char item[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(item, sizeof item, "i%d", i % 100);
        itemmap_entry_t *e = itemmap_get(&m, span_of(item));
        CHECK(e != NULL);
        if (e)
            e->deltas[1]++;
    }
    CHECK(m.count == 100);
    const itemmap_entry_t *e = itemmap_find(&m, SPAN_LIT("i7"));
    CHECK(e && e->deltas[1] == 10 && !itemmap_entry_is_zero(e));
    CHECK(itemmap_find(&m, SPAN_LIT("i100")) == NULL);
    itemmap_free(&m);
    CHECK(itemmap_find(&m, SPAN_LIT("i7")) == NULL);
}

void test_histogram(void)
{
    static histogram_t h;
    const double bounds[] = {1, 10};
    histogram_init(&h, bounds, 2);
    histogram_observe(&h, 0.5);
    histogram_observe(&h, 1);
    histogram_observe(&h, 5);
    histogram_observe(&h, 50);
    CHECK(atomic_load(&h.counts[0]) == 2 && atomic_load(&h.counts[1]) == 1 && atomic_load(&h.counts[2]) == 1);
    CHECK(atomic_load(&h.count) == 4 && atomic_load(&h.sum) == 56.5);
}

static size_t pairs_present(const pairfilter_t *f, const char *item_fmt, int from, int to)
{
    char item[32], user[32];
    size_t n = 0;
    for (int i = from; i < to; i++) {
        snprintf(item, sizeof item, item_fmt, i % 1000);
        snprintf(user, sizeof user, "u%d", i);
        n += pairfilter_may_contain(f, span_of(item), span_of(user));
    }
    return n;
}

void test_pairfilter(void)
{
    pairfilter_t f;
    char item[32], user[32];
    /* no filter: everything may be there */
    CHECK(pairfilter_init(&f, 0) == 0 && pairfilter_may_contain(&f, SPAN_LIT("i"), SPAN_LIT("u")));
    pairfilter_add(&f, SPAN_LIT("i"), SPAN_LIT("u"));
    pairfilter_free(&f);

    /* 64 KiB = 524 288 bits for 52 428 pairs: 10 bits a pair */
    CHECK(pairfilter_init(&f, 65536 + 100) == 0 && f.nblocks == 1024);
    CHECK(pairs_present(&f, "i%d", 0, 52428) == 0); /* empty: every answer is a certain no */
    for (int i = 0; i < 52428; i++) {
        snprintf(item, sizeof item, "i%d", i % 1000);
        snprintf(user, sizeof user, "u%d", i);
        pairfilter_add(&f, span_of(item), span_of(user));
    }
    CHECK(pairs_present(&f, "i%d", 0, 52428) == 52428);    /* no false negative */
    size_t fp = pairs_present(&f, "i%d", 52428, 152428);   /* 100 000 pairs never added */
    CHECK(fp < 3000);                                      /* under 3 % (about 1–2 % expected) */
    size_t fp_other = pairs_present(&f, "j%d", 0, 100000); /* other items, same users */
    CHECK(fp_other < 3000);
    /* the pair is (item, user), not their concatenation */
    pairfilter_free(&f);
    CHECK(pairfilter_init(&f, 1 << 20) == 0);
    pairfilter_add(&f, SPAN_LIT("ab"), SPAN_LIT("c"));
    CHECK(pairfilter_may_contain(&f, SPAN_LIT("ab"), SPAN_LIT("c")));
    CHECK(!pairfilter_may_contain(&f, SPAN_LIT("a"), SPAN_LIT("bc")));
    pairfilter_free(&f);
}

/* ratelimit_new tells "off" from "out of memory": a server must not run unlimited because the table
 * could not be allocated. */
void test_ratelimit(void)
{
    ratelimit_t *rl = (ratelimit_t *)1;
    CHECK(ratelimit_new((ratelimit_rule_t){0, 0}, 1024, &rl) == 0 && rl == NULL); /* off */
    CHECK(ratelimit_take(NULL, SPAN_LIT("u"), 0) == 0);
    CHECK(ratelimit_new((ratelimit_rule_t){1, 1}, 1024, &rl) == 0 && rl != NULL);
    CHECK(ratelimit_take(rl, SPAN_LIT("u"), 1000) == 0 && ratelimit_take(rl, SPAN_LIT("u"), 1000) >= 1);
    ratelimit_free(rl);
    rl = (ratelimit_t *)1;
    /* A table too large to allocate (the unit tests run with allocator_may_return_null). */
    CHECK(ratelimit_new((ratelimit_rule_t){1, 1}, SIZE_MAX / 2, &rl) == -1 && rl == NULL);
}
