/* test_live.c — the pure parts of live counts: the event text (core/sse.c), the name table the
 * subscriptions use (core/strmap.c, checked against a plain array under random inserts and
 * deletes), and the cursor splice of write answers (core/answer.c), reserved before a commit. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/answer.h"
#include "core/sse.h"
#include "core/strmap.h"
#include "unit.h"

static bool text_is(const textbuf_t *b, const char *want)
{
    return !b->failed && b->len == strlen(want) && memcmp(b->buf, want, b->len) == 0;
}

static void test_sse_text(void)
{
    kinds_t k;
    char err[64];
    kinds_parse(&k, "like,dislike", err, sizeof err);
    int64_t counts[KINDS_MAX + 1] = {0, 10, 2};
    textbuf_t b = {0};
    sse_retry(&b, SSE_RETRY_MS);
    CHECK(text_is(&b, "retry: 2000\n\n"));
    b.len = 0;
    sse_counts_event(&b, 8812, &k, SPAN_LIT("a"), counts);
    CHECK(text_is(&b, "id: 8812\nevent: counts\ndata: {\"item\":\"a\",\"counts\":{\"like\":10,\"dislike\":2}}\n\n"));
    b.len = 0;
    sse_counts_event(&b, 0, &k, SPAN_LIT("v1.x~y"), (int64_t[KINDS_MAX + 1]){0});
    CHECK(text_is(&b, "id: 0\nevent: counts\ndata: {\"item\":\"v1.x~y\",\"counts\":{\"like\":0,\"dislike\":0}}\n\n"));
    /* the data line is one line: a client's parser reads the JSON whole */
    const char *data = memmem(b.buf, b.len, "data: ", 6);
    CHECK(data && memchr(data, '\n', (size_t)(b.buf + b.len - data)) == b.buf + b.len - 2);
    CHECK(strcmp(SSE_KEEPALIVE, ": keep-alive\n\n") == 0);
    free(b.buf);
}

#define NAMES 3000

static void test_strmap_against_array(void)
{
    strmap_t m = {0};
    static char names[NAMES][16];
    static uint64_t want[NAMES]; /* 0: absent */
    for (int i = 0; i < NAMES; i++)
        snprintf(names[i], sizeof names[i], "n%d", i);
    unsigned seed = 7;
    size_t present = 0;
    for (int round = 0; round < 40000; round++) {
        seed = seed * 1103515245u + 12345u;
        int i = (int)((seed >> 8) % NAMES);
        span_t key = span_of(names[i]);
        if ((seed >> 4) % 3) {
            uint64_t *v = strmap_get(&m, key);
            CHECK(v != NULL);
            if (!v)
                break;
            present += want[i] == 0;
            *v += 1;
            want[i] += 1;
        } else {
            strmap_delete(&m, key);
            present -= want[i] != 0;
            want[i] = 0;
        }
    }
    bool all = m.count == present;
    for (int i = 0; i < NAMES; i++) {
        uint64_t *v = strmap_find(&m, span_of(names[i]));
        all = all && (want[i] ? v && *v == want[i] : v == NULL);
    }
    CHECK(all);
    CHECK(strmap_get(&m, (span_t){"", 0}) == NULL);
    char long_name[ID_MAX_LEN + 1];
    memset(long_name, 'x', sizeof long_name);
    CHECK(strmap_get(&m, (span_t){long_name, ID_MAX_LEN + 1}) == NULL);
    CHECK(strmap_get(&m, (span_t){long_name, ID_MAX_LEN}) != NULL);
    /* keys are bytes: an 8-byte token with zeros in it */
    uint64_t token = 5ull << 6;
    uint64_t *t = strmap_get(&m, (span_t){(const char *)&token, sizeof token});
    CHECK(t && *t == 0);
    strmap_free(&m);
    CHECK(m.count == 0 && strmap_find(&m, SPAN_LIT("n1")) == NULL);
}

static void test_answer_cursor(void)
{
    /* a write result as answer_write_result renders it (built here from its text, so that the
     * test does not depend on how reactions are passed to it) */
    static const char result[] =
        "{\"item\":\"v1\",\"reaction\":\"like\",\"previous\":\"none\",\"version\":3,\"changed\":true}";
    answer_t a = {0};
    char *body = malloc(sizeof result - 1);
    CHECK(body != NULL);
    if (!body)
        return;
    memcpy(body, result, sizeof result - 1);
    answer_set_body(&a, 200, ANSWER_JSON, body, sizeof result - 1);
    a.has_etag = true;
    a.etag_version = 3;
    CHECK(answer_set_cursor(&a, 8812) == 0);
    const char want[] = "{\"item\":\"v1\",\"reaction\":\"like\",\"previous\":\"none\",\"version\":3,\"changed\":true,"
                        "\"cursor\":\"8812\"}";
    CHECK(a.body_len == sizeof want - 1 && memcmp(a.body, want, a.body_len) == 0);
    CHECK(a.status == 200 && a.has_etag && a.etag_version == 3);
    /* still one JSON object, the cursor a string */
    json_t *doc = json_loadb(a.body, a.body_len, 0, NULL);
    CHECK(doc && json_is_string(json_object_get(doc, "cursor")) &&
          strcmp(json_string_value(json_object_get(doc, "cursor")), "8812") == 0);
    json_decref(doc);
    /* a body with no closing brace is refused and left as it was: never turned into an error */
    answer_t b = {0};
    answer_set_body(&b, 200, ANSWER_JSON, NULL, 0);
    CHECK(answer_set_cursor(&b, 1) == -1 && b.status == 200 && b.body_len == 0);
    CHECK(answer_reserve_cursor(&b) == -1 && b.status == 200 && b.body_len == 0);
    answer_free(&a);
    answer_free(&b);
}

/* Reserved before a commit, the splice after it writes into memory already held: the same buffer
 * (no allocation, so nothing that can fail), for every cursor up to the largest. */
static void test_answer_cursor_reserved(void)
{
    static const char result[] = "{\"item\":\"v1\",\"changed\":true}";
    const uint64_t cursors[] = {1, 8812, UINT64_MAX};
    for (size_t i = 0; i < sizeof cursors / sizeof cursors[0]; i++) {
        answer_t a = {0};
        char *body = malloc(sizeof result - 1);
        CHECK(body != NULL);
        if (!body)
            return;
        memcpy(body, result, sizeof result - 1);
        answer_set_body(&a, 200, ANSWER_JSON, body, sizeof result - 1);
        CHECK(answer_reserve_cursor(&a) == 0);
        CHECK(a.body_len == sizeof result - 1 && memcmp(a.body, result, a.body_len) == 0); /* unchanged */
        CHECK(answer_reserve_cursor(&a) == 0);                                             /* idempotent */
        const char *held = a.body;
        size_t cap = a.body_cap;
        CHECK(answer_set_cursor(&a, cursors[i]) == 0);
        CHECK(a.body == held && a.body_cap == cap && a.body_len <= cap);
        char want[128];
        snprintf(want, sizeof want, "{\"item\":\"v1\",\"changed\":true,\"cursor\":\"%llu\"}",
                 (unsigned long long)cursors[i]);
        CHECK(a.body_len == strlen(want) && memcmp(a.body, want, a.body_len) == 0);
        CHECK(a.status == 200);
        answer_free(&a);
        CHECK(a.body == NULL && a.body_cap == 0);
    }
    /* a body allocated with its room by its owner (the writer's replay of a record whose cursor
     * comes at commit) is spliced in place too */
    answer_t c = {0};
    char *body = malloc(sizeof result - 1 + ANSWER_CURSOR_ROOM);
    CHECK(body != NULL);
    if (!body)
        return;
    memcpy(body, result, sizeof result - 1);
    answer_set_body(&c, 200, ANSWER_JSON, body, sizeof result - 1);
    c.body_cap = sizeof result - 1 + ANSWER_CURSOR_ROOM;
    CHECK(answer_set_cursor(&c, UINT64_MAX) == 0 && c.body == body);
    answer_free(&c);
}

/* A body with its bytes copied in, ready for splices. */
static void answer_of(answer_t *a, const char *text)
{
    size_t n = strlen(text);
    char *body = malloc(n);
    CHECK(body != NULL);
    if (!body)
        return;
    memcpy(body, text, n);
    answer_set_body(a, 200, ANSWER_JSON, body, n);
}

/* PostgreSQL's format() of the numbers, in C: each %s in turn replaced by the next number. */
static void format_like_sql(const char *fmt, const int64_t *nums, size_t n, char *out, size_t len)
{
    size_t o = 0, i = 0;
    for (const char *p = fmt; *p && o + 24 < len; p++) {
        if (p[0] == '%' && p[1] == 's' && i < n) {
            o += (size_t)snprintf(out + o, len - o, "%lld", (long long)nums[i++]);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/* The counts splice of a write answer: every kind in order (zeros too), the reactors in many mode,
 * null when hidden; the room reserved before is enough for the largest numbers, so the splice after
 * a commit does not allocate; and the SQL format gives the same bytes. */
static void test_answer_counts(void)
{
    char err[128];
    kinds_t one, many;
    CHECK(kinds_parse(&one, "like,dislike", err, sizeof err) == 0);
    CHECK(kinds_parse(&many, "like,love,haha", err, sizeof err) == 0);
    many.mode = REACTION_MODE_MANY;
    answer_t a = {0};
    answer_of(&a, "{\"item\":\"v1\",\"changed\":true,\"cursor\":\"7\"}");
    int64_t c1[KINDS_MAX + 1] = {[0] = 12, [1] = 10, [2] = 2};
    CHECK(answer_set_counts(&a, &one, c1) == 0);
    static const char want1[] =
        "{\"item\":\"v1\",\"changed\":true,\"cursor\":\"7\",\"counts\":{\"like\":10,\"dislike\":2}}";
    CHECK(a.body_len == sizeof want1 - 1 && memcmp(a.body, want1, a.body_len) == 0);
    answer_free(&a);

    answer_of(&a, "{\"changed\":false}");
    int64_t c2[KINDS_MAX + 1] = {[0] = 3, [1] = 1, [2] = 0, [3] = 2};
    CHECK(answer_set_counts(&a, &many, c2) == 0);
    static const char want2[] = "{\"changed\":false,\"counts\":{\"like\":1,\"love\":0,\"haha\":2},\"reactors\":3}";
    CHECK(a.body_len == sizeof want2 - 1 && memcmp(a.body, want2, a.body_len) == 0);
    answer_free(&a);

    answer_of(&a, "{\"changed\":true}");
    CHECK(answer_set_counts(&a, &many, NULL) == 0);
    static const char want3[] = "{\"changed\":true,\"counts\":null,\"reactors\":null}";
    CHECK(a.body_len == sizeof want3 - 1 && memcmp(a.body, want3, a.body_len) == 0);
    answer_free(&a);
    answer_of(&a, "{\"changed\":true}");
    CHECK(answer_set_counts(&a, &one, NULL) == 0);
    static const char want4[] = "{\"changed\":true,\"counts\":null}";
    CHECK(a.body_len == sizeof want4 - 1 && memcmp(a.body, want4, a.body_len) == 0);
    answer_free(&a);

    /* reserved with the cursor's room: both splices of the largest numbers write in place */
    const kinds_t *modes[] = {&one, &many};
    for (size_t m = 0; m < 2; m++) {
        answer_of(&a, "{\"item\":\"v1\",\"changed\":true}");
        CHECK(answer_reserve(&a, ANSWER_CURSOR_ROOM + answer_counts_room(modes[m])) == 0);
        const char *held = a.body;
        int64_t big[KINDS_MAX + 1];
        for (int k = 0; k <= KINDS_MAX; k++)
            big[k] = INT64_MIN;
        CHECK(answer_set_cursor(&a, UINT64_MAX) == 0 && answer_set_counts(&a, modes[m], big) == 0);
        CHECK(a.body == held && a.body_len <= a.body_cap);
        json_t *doc = json_loadb(a.body, a.body_len, 0, NULL);
        CHECK(doc && json_is_object(json_object_get(doc, "counts")));
        json_decref(doc);
        answer_free(&a);
    }

    /* the SQL format gives the splice's bytes */
    char fmt[1024], sql[1024];
    for (size_t m = 0; m < 2; m++) {
        const kinds_t *k = modes[m];
        size_t n = answer_counts_format(k, fmt, sizeof fmt);
        CHECK(n > 0 && fmt[n - 1] == '}' && strlen(fmt) == n);
        int64_t c[KINDS_MAX + 1] = {[0] = 9, [1] = 4, [2] = 0, [3] = 5};
        int64_t nums[KINDS_MAX + 1];
        size_t nn = 0;
        for (int i = 1; i <= k->count; i++)
            nums[nn++] = c[i];
        if (k->mode == REACTION_MODE_MANY)
            nums[nn++] = c[0];
        format_like_sql(fmt, nums, nn, sql, sizeof sql);
        answer_of(&a, "{\"x\":1}");
        CHECK(answer_set_counts(&a, k, c) == 0);
        CHECK(a.body_len == 6 + strlen(sql) && memcmp(a.body + 6, sql, strlen(sql)) == 0);
        answer_free(&a);
    }
    CHECK(answer_counts_format(&one, fmt, 8) == 0); /* too small */
}

void test_live(void)
{
    test_sse_text();
    test_strmap_against_array();
    test_answer_cursor();
    test_answer_cursor_reserved();
    test_answer_counts();
}
