/* test_pairfilter.c — the filter of which (item, user) pairs have a row (core/pairfilter.h). */
#include <stdio.h>

#include "core/pairfilter.h"
#include "unit.h"

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
