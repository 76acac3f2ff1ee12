/* test_feedmerge.c — a page merged from several shards' logs (core/feedmerge.h): never skips an
 * entry (what it takes of a shard is a prefix), keeps each shard's order, interleaves by time,
 * gives the same page again from exactly the prefixes it took; entries carry "S.P"; a write
 * answer's cursor names its shard (answer_cursor_shard). */
#include <string.h>

#include "core/answer.h"
#include "core/feedmerge.h"
#include "unit.h"

/* Shard k's entries: seqs from first, times given; each entry's text "kP". */
static void fill(feedmerge_shard_t *s, uint32_t k, uint64_t first, const uint64_t *at, size_t n)
{
    feedmerge_shard_init(s, NULL, 3, k);
    for (size_t i = 0; i < n; i++) {
        char text[32];
        int len = snprintf(text, sizeof text, "%u.%llu", k, (unsigned long long)(first + i));
        CHECK(feedmerge_add_text(s, first + i, at[i], (span_t){text, (size_t)len}) == 0);
    }
}

static bool page_is(textbuf_t *b, const char *want)
{
    bool same = b->len == strlen(want) && memcmp(b->buf, want, b->len) == 0;
    if (!same)
        fprintf(stderr, "page %.*s, want %s\n", (int)b->len, b->buf, want);
    free(b->buf);
    *b = (textbuf_t){0};
    return same;
}

static void test_merge(void)
{
    static feedmerge_shard_t s[3];
    /* shard 1's clock runs behind: its second entry is older than its first; still after it */
    const uint64_t at0[] = {10, 20, 30}, at1[] = {15, 5, 40}, at2[] = {0};
    fill(&s[0], 0, 100, at0, 3);
    fill(&s[1], 1, 7, at1, 3);
    fill(&s[2], 2, 50, at2, 0);
    textbuf_t b = {0};
    uint64_t pos[3] = {99, 6, 49}, first_at = 0;
    CHECK(feedmerge_take(s, 3, 4, &b, pos, &first_at) == 4);
    CHECK(page_is(&b, "0.100,1.7,1.8,0.101"));
    CHECK(pos[0] == 101 && pos[1] == 8 && pos[2] == 49 && first_at == 5);
    /* everything: each shard whole, in its order */
    pos[0] = 99, pos[1] = 6;
    CHECK(feedmerge_take(s, 3, 100, &b, pos, NULL) == 6);
    CHECK(page_is(&b, "0.100,1.7,1.8,0.101,0.102,1.9"));
    CHECK(pos[0] == 102 && pos[1] == 9 && pos[2] == 49);
    /* the prefixes a page of 4 took, merged alone, give that page again (a webhook batch resent) */
    static feedmerge_shard_t p[3];
    fill(&p[0], 0, 100, at0, 2);
    fill(&p[1], 1, 7, at1, 2);
    fill(&p[2], 2, 50, at2, 0);
    CHECK(feedmerge_take(p, 3, 100, &b, pos, NULL) == 4);
    CHECK(page_is(&b, "0.100,1.7,1.8,0.101"));
    /* a tie goes to the lower shard; nothing at all leaves the positions */
    const uint64_t same[] = {10};
    static feedmerge_shard_t t[2];
    fill(&t[0], 0, 1, same, 1);
    fill(&t[1], 1, 1, same, 1);
    uint64_t tp[2] = {0, 0};
    CHECK(feedmerge_take(t, 2, 1, &b, tp, NULL) == 1 && tp[0] == 1 && tp[1] == 0);
    CHECK(page_is(&b, "0.1"));
    CHECK(feedmerge_take(t, 2, 0, &b, tp, &first_at) == 0 && first_at == 0 && tp[0] == 1);
    free(b.buf);
    for (int k = 0; k < 3; k++) {
        feedmerge_shard_free(&s[k]);
        feedmerge_shard_free(&p[k]);
    }
    feedmerge_shard_free(&t[0]);
    feedmerge_shard_free(&t[1]);
}

/* Rendered entries: one shard the decimal position (as ever), several "S.P"; stop_after stops. */
static void test_render(void)
{
    kinds_t k;
    char err[64];
    kinds_parse(&k, "like", err, sizeof err);
    transition_t t = {.item = SPAN_LIT("v1"), .user = SPAN_LIT("u1"), .to = kindset_of(1), .version = 1, .at_ms = 1};
    feedmerge_shard_t one, two;
    feedmerge_shard_init(&one, &k, 1, 0);
    feedmerge_shard_init(&two, &k, 2, 1);
    two.stop_after = 8;
    CHECK(feedmerge_read_fn(&one, 42, &t) == 0 && feedmerge_read_fn(&two, 8, &t) == 0);
    CHECK(feedmerge_read_fn(&two, 9, &t) == 1 && two.n == 1 && !two.failed);
    CHECK(one.n == 1 && strncmp(one.text.buf, "{\"cursor\":\"42\",\"item\":\"v1\"", 26) == 0);
    CHECK(strncmp(two.text.buf, "{\"cursor\":\"1.8\",\"item\":\"v1\"", 27) == 0);
    feedmerge_shard_free(&one);
    feedmerge_shard_free(&two);
}

static void test_answer_cursor(void)
{
    kinds_t k;
    char err[64];
    kinds_parse(&k, "like", err, sizeof err);
    answer_t a = {0};
    CHECK(answer_write_result(&a, &k, SPAN_LIT("v1"), kindset_of(1), KINDSET_EMPTY, 3, true) == 0);
    CHECK(answer_set_cursor(&a, 8812) == 0);
    const int64_t counts[2] = {0, 4};
    CHECK(answer_set_counts(&a, &k, counts) == 0);
    char *before = strndup(a.body, a.body_len);
    CHECK(answer_cursor_shard(&a, 1, 0) == 0 && strlen(before) == a.body_len &&
          memcmp(before, a.body, a.body_len) == 0); /* one shard: as ever */
    CHECK(answer_cursor_shard(&a, 4, 3) == 0);
    const char want[] = "{\"item\":\"v1\",\"reaction\":\"like\",\"previous\":\"none\",\"version\":3,\"changed\":true,"
                        "\"cursor\":\"3.8812\",\"counts\":{\"like\":4}}";
    CHECK(a.body_len == strlen(want) && memcmp(a.body, want, a.body_len) == 0);
    free(before);
    /* no cursor (nothing changed): untouched */
    CHECK(answer_write_result(&a, &k, SPAN_LIT("v1"), kindset_of(1), kindset_of(1), 3, false) == 0);
    size_t len = a.body_len;
    CHECK(answer_cursor_shard(&a, 4, 3) == 0 && a.body_len == len && !strstr(a.body, "cursor"));
    answer_free(&a);
}

void test_feedmerge(void)
{
    test_merge();
    test_render();
    test_answer_cursor();
}
