/* kindsjson.c — sets of kinds to and from JSON. */
#include "core/kindsjson.h"

#include <stdio.h>
#include <string.h>

json_t *kindset_json(const kinds_t *kinds, kindset_t set)
{
    if (kinds->mode == REACTION_MODE_ONE)
        return json_string(kinds_name(kinds, kindset_single(set)));
    json_t *arr = json_array();
    for (int k = 1; arr && k <= kinds->count; k++)
        if (kindset_has(set, k) && json_array_append_new(arr, json_string(kinds_name(kinds, k))) != 0) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

void kindset_append(textbuf_t *b, const kinds_t *kinds, kindset_t set)
{
    if (kinds->mode == REACTION_MODE_ONE) {
        textbuf_safe(b, span_of(kinds_name(kinds, kindset_single(set))));
        return;
    }
    textbuf_lit(b, "[");
    bool first = true;
    for (int k = 1; k <= kinds->count; k++)
        if (kindset_has(set, k)) {
            if (!first)
                textbuf_lit(b, ",");
            first = false;
            textbuf_safe(b, span_of(kinds_name(kinds, k)));
        }
    textbuf_lit(b, "]");
}

static int kindset_add_name(const kinds_t *kinds, span_t name, kindset_t *set, char *err, size_t errlen)
{
    int k = kinds_find(kinds, name, false);
    if (k < 0) {
        snprintf(err, errlen, "'%.*s' is not a configured reaction", (int)(name.len > 64 ? 64 : name.len), name.ptr);
        return -1;
    }
    if (kindset_has(*set, k)) {
        snprintf(err, errlen, "'%s' is listed twice", kinds_name(kinds, k));
        return -1;
    }
    *set |= kindset_of(k);
    return 0;
}

int kindset_from_json(const kinds_t *kinds, const json_t *array, kindset_t *set, char *err, size_t errlen)
{
    *set = KINDSET_EMPTY;
    if (!json_is_array(array)) {
        snprintf(err, errlen, "reactions must be an array of reaction names");
        return -1;
    }
    size_t i;
    const json_t *v;
    json_array_foreach(array, i, v)
    {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "reactions must be an array of reaction names");
            return -1;
        }
        if (kindset_add_name(kinds, (span_t){json_string_value(v), json_string_length(v)}, set, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int kindset_from_text(const kinds_t *kinds, span_t text, char sep, kindset_t *set, char *err, size_t errlen)
{
    *set = KINDSET_EMPTY;
    size_t start = 0;
    while (text.len && start <= text.len) {
        const char *end = memchr(text.ptr + start, sep, text.len - start);
        size_t len = end ? (size_t)(end - (text.ptr + start)) : text.len - start;
        if (kindset_add_name(kinds, (span_t){text.ptr + start, len}, set, err, errlen) != 0)
            return -1;
        if (!end)
            break;
        start += len + 1;
    }
    return 0;
}
