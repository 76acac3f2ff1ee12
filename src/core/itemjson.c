/* itemjson.c — rendering of item objects without a tree or stdio. */
#include "core/itemjson.h"

#include <assert.h>
#include <stdlib.h>

void textbuf_append(textbuf_t *b, const char *p, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = realloc(b->buf, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->buf = grown;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

#define LIT(b, s) textbuf_append((b), (s), sizeof(s) - 1)

/* A string from an alphabet that never needs escaping (ids, kind names: validated where they enter). */
static void safe_string(textbuf_t *b, span_t s)
{
    for (size_t i = 0; i < s.len; i++)
        assert(s.ptr[i] != '"' && s.ptr[i] != '\\' && (unsigned char)s.ptr[i] >= 0x20);
    LIT(b, "\"");
    textbuf_append(b, s.ptr, s.len);
    LIT(b, "\"");
}

static void integer(textbuf_t *b, int64_t v)
{
    char digits[24];
    size_t n = sizeof digits;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        digits[--n] = '-';
    textbuf_append(b, digits + n, sizeof digits - n);
}

void itemjson_append(textbuf_t *b, const kinds_t *kinds, span_t item, const int64_t counts[KINDS_MAX + 1],
                     const reaction_row_t *viewer)
{
    LIT(b, "{\"item\":");
    safe_string(b, item);
    LIT(b, ",\"counts\":{");
    for (int k = 1; k <= kinds->count; k++) {
        if (k > 1)
            LIT(b, ",");
        safe_string(b, span_of(kinds_name(kinds, k)));
        LIT(b, ":");
        integer(b, counts[k]);
    }
    LIT(b, "}");
    if (kinds->mode == REACTION_MODE_MANY) {
        LIT(b, ",\"reactors\":");
        integer(b, counts[KIND_NONE]);
    }
    if (viewer) {
        if (kinds->mode == REACTION_MODE_MANY) {
            LIT(b, ",\"viewer\":{\"reactions\":[");
            bool first = true;
            for (int k = 1; k <= kinds->count; k++)
                if (kindset_has(viewer->set, k)) {
                    if (!first)
                        LIT(b, ",");
                    first = false;
                    safe_string(b, span_of(kinds_name(kinds, k)));
                }
            LIT(b, "]");
        } else {
            LIT(b, ",\"viewer\":{\"reaction\":");
            safe_string(b, span_of(kinds_name(kinds, kindset_single(viewer->set))));
        }
        LIT(b, ",\"version\":");
        integer(b, (int64_t)viewer->version);
        LIT(b, "}");
    }
    LIT(b, "}");
}
