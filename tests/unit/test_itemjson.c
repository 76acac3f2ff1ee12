/* test_itemjson.c — the hand-rendered item object equals jansson's compact dump, byte for byte. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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
}
