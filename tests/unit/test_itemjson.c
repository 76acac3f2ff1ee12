/* test_itemjson.c — the hand-rendered item objects and change-feed entries equal jansson's compact dump, byte for byte.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/changejson.h"
#include "core/itemjson.h"
#include "core/kindsjson.h"
#include "unit.h"

/* The same object built with jansson, as the handlers did before itemjson. */
static char *with_jansson(const kinds_t *kinds, span_t item, const int64_t counts[], const reaction_row_t *viewer)
{
    json_t *c = json_object();
    for (int k = 1; k <= kinds->count; k++)
        json_object_set_new(c, kinds_name(kinds, k), json_integer(counts[k]));
    json_t *obj = json_pack("{s:s%,s:o}", "item", item.ptr, item.len, "counts", c);
    if (kinds->mode == REACTION_MODE_MANY)
        json_object_set_new(obj, "reactors", json_integer(counts[0]));
    if (viewer)
        json_object_set_new(obj, "viewer",
                            json_pack("{s:o,s:I}", kindset_member(kinds), kindset_json(kinds, viewer->set), "version",
                                      (json_int_t)viewer->version));
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return text;
}

static void same(const kinds_t *kinds, const char *item, const int64_t counts[], const reaction_row_t *viewer)
{
    textbuf_t b = {0};
    itemjson_append(&b, kinds, span_of(item), counts, viewer);
    char *want = with_jansson(kinds, span_of(item), counts, viewer);
    CHECK(!b.failed && want && b.len == strlen(want) && memcmp(b.buf, want, b.len) == 0);
    free(want);
    free(b.buf);
}

static void same_viewer(const kinds_t *kinds, const char *item, const reaction_row_t *row)
{
    textbuf_t b = {0};
    itemjson_viewer_append(&b, kinds, span_of(item), row);
    json_t *obj = json_pack("{s:s,s:o,s:I}", "item", item, kindset_member(kinds), kindset_json(kinds, row->set),
                            "version", (json_int_t)row->version);
    char *want = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    CHECK(!b.failed && want && b.len == strlen(want) && memcmp(b.buf, want, b.len) == 0);
    free(want);
    free(b.buf);
}

void test_itemjson(void)
{
    kinds_t two, sixteen;
    char err[64];
    kinds_parse(&two, "like,dislike", err, sizeof err);
    kinds_parse(&sixteen, "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o_p,q9", err, sizeof err);
    int64_t zero[KINDS_MAX + 1] = {0}, big[KINDS_MAX + 1];
    for (int k = 0; k <= KINDS_MAX; k++)
        big[k] = k % 2 ? INT64_MAX / (k + 1) : (int64_t)k * 1000003;
    reaction_row_t none = {KINDSET_EMPTY, 0}, like = {kindset_of(1), 3}, last = {kindset_of(16), UINT32_MAX * 7ull};
    reaction_row_t several = {kindset_of(1) | kindset_of(5) | kindset_of(16), 9};
    same(&two, "v1", zero, NULL);
    same(&two, "v1", zero, &none);
    same(&two, "A-z_0.9:~x", big, &like);
    same(&sixteen, "post-42", big, &last);
    same(&sixteen, "...", zero, NULL);
    kinds_t many = sixteen;
    many.mode = REACTION_MODE_MANY;
    same(&many, "m", big, &several);
    same(&many, "m", zero, &none);
    same(&many, "m", big, NULL);
    /* A page: several objects appended to one buffer stay valid JSON. */
    textbuf_t page = {0};
    textbuf_append(&page, "[", 1);
    itemjson_append(&page, &two, SPAN_LIT("a"), big, &like);
    textbuf_append(&page, ",", 1);
    itemjson_append(&page, &two, SPAN_LIT("b"), zero, NULL);
    textbuf_append(&page, "]", 1);
    json_t *doc = json_loadb(page.buf, page.len, 0, NULL);
    CHECK(json_is_array(doc) && json_array_size(doc) == 2);
    json_decref(doc);
    free(page.buf);
    /* The viewer's part (GET /v1/viewer) is byte for byte the answer of GET …/reaction. */
    same_viewer(&two, "v1", &none);
    same_viewer(&two, "A-z_0.9:~x", &like);
    same_viewer(&sixteen, "post-42", &last);
    same_viewer(&many, "m", &several);
    same_viewer(&many, "m", &none);
}

/* A change-feed entry as text equals jansson's compact dump of changejson_entry, byte for byte. */
static void same_entry(const kinds_t *kinds, uint64_t seq, const transition_t *t)
{
    textbuf_t b = {0};
    changejson_append(&b, kinds, seq, t);
    json_t *obj = changejson_entry(kinds, seq, t);
    char *want = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    CHECK(!b.failed && want && b.len == strlen(want) && memcmp(b.buf, want, b.len) == 0);
    free(want);
    free(b.buf);
}

void test_changejson(void)
{
    kinds_t two, many;
    char err[64];
    kinds_parse(&two, "like,dislike", err, sizeof err);
    kinds_parse(&many, "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o_p,q9", err, sizeof err);
    many.mode = REACTION_MODE_MANY;
    transition_t t = {.item = SPAN_LIT("post-1"),
                      .user = SPAN_LIT("u~7:x.y_Z"),
                      .from = KINDSET_EMPTY,
                      .to = kindset_of(1),
                      .version = 1,
                      .at_ms = 1764619200123ull};
    same_entry(&two, 1, &t);
    t.from = kindset_of(1);
    t.to = kindset_of(2);
    t.version = UINT32_MAX * 9ull;
    t.at_ms = 0;
    same_entry(&two, UINT64_MAX, &t);
    t.to = KINDSET_EMPTY;
    t.at_ms = 253402300799999ull; /* 9999-12-31T23:59:59.999Z */
    same_entry(&two, 1234567890123ull, &t);
    t.from = kindset_of(1) | kindset_of(16);
    t.to = kindset_of(3) | kindset_of(5) | kindset_of(16);
    same_entry(&many, 42, &t);
    t.from = KINDSET_EMPTY;
    t.to = KINDSET_EMPTY;
    same_entry(&many, 43, &t);
    /* counted appears only for a voided user's entries, as [before, after] */
    t.from = t.to = kindset_of(2);
    t.uncounted = TRANSITION_UNCOUNTED_AFTER;
    same_entry(&many, 44, &t);
    textbuf_t one = {0};
    changejson_append(&one, &many, 44, &t);
    size_t one_len = 0;
    char *one_text = textbuf_finish(&one, &one_len);
    CHECK(one_text && strstr(one_text, ",\"counted\":[true,false]}") != NULL);
    free(one_text);
    t.uncounted = TRANSITION_UNCOUNTED_BOTH;
    same_entry(&two, 45, &t);
    t.uncounted = 0;
    textbuf_t plain = {0};
    changejson_append(&plain, &two, 46, &t);
    size_t plain_len = 0;
    char *plain_text = textbuf_finish(&plain, &plain_len);
    CHECK(plain_text && strstr(plain_text, "counted") == NULL);
    free(plain_text);
    /* A page of entries joined stays valid JSON with every entry. */
    textbuf_t page = {0};
    textbuf_lit(&page, "[");
    for (uint64_t seq = 1; seq <= 100; seq++) {
        if (seq > 1)
            textbuf_lit(&page, ",");
        changejson_append(&page, &many, seq, &t);
    }
    textbuf_lit(&page, "]");
    size_t len = 0;
    char *text = textbuf_finish(&page, &len);
    json_t *doc = text ? json_loadb(text, len, 0, NULL) : NULL;
    CHECK(json_is_array(doc) && json_array_size(doc) == 100 &&
          strcmp(json_string_value(json_object_get(json_array_get(doc, 99), "cursor")), "100") == 0);
    json_decref(doc);
    free(text);
}

/* The commit time as the library renders it. */
static void library_time(uint64_t ms, char want[32])
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(want, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(want + n, 32 - n, ".%03uZ", (unsigned)(ms % 1000));
}

/* The hand-rendered commit time equals gmtime_r + strftime: leap days, century boundaries, the
 * last instant of 9999, and every day from 1970 to 2400 at a varying time of day. */
void test_iso_time(void)
{
    uint64_t samples[] = {0,
                          1,
                          999,
                          1000,
                          59999,
                          86399999,
                          86400000,
                          951782400000ull /* 2000-02-29 */,
                          4107542399999ull /* 2100-02-28T23:59:59.999 */,
                          1764619200123ull,
                          253402300799999ull /* 9999-12-31T23:59:59.999 */,
                          253402300800000ull /* 10000 */};
    char got[32], want[32];
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        changejson_iso_time(samples[i], got);
        library_time(samples[i], want);
        CHECK(strcmp(got, want) == 0);
    }
    size_t wrong = 0;
    for (uint64_t day = 0; day < 157000; day++) {
        uint64_t ms = day * 86400000ull + day * 7919ull % 86400000ull;
        changejson_iso_time(ms, got);
        library_time(ms, want);
        wrong += strcmp(got, want) != 0;
    }
    CHECK(wrong == 0);
}

/* textbuf_printf: into the room there is, and past it (the buffer grown, nothing lost). */
void test_textbuf(void)
{
    textbuf_t b = {0};
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    textbuf_printf(&b, "a%db", 42);
    textbuf_printf(&b, "<%s>", big);
    textbuf_printf(&b, "%s", "");
    textbuf_lit(&b, "!");
    size_t len = 0;
    char *text = textbuf_finish(&b, &len);
    CHECK(text && len == 4 + 2 + strlen(big) + 1 && strncmp(text, "a42b<x", 6) == 0 &&
          strcmp(text + len - 2, ">!") == 0);
    free(text);
}
