/* textbuf.c — rendering JSON text without a tree or stdio (see textbuf.h). */
#include "core/textbuf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXTBUF_FIRST_CAP 1024

/* Room for n more bytes. Returns false (and marks b failed) when out of memory. */
static bool textbuf_room(textbuf_t *b, size_t n)
{
    if (b->failed)
        return false;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : TEXTBUF_FIRST_CAP;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = realloc(b->buf, cap);
        if (!grown) {
            b->failed = true;
            return false;
        }
        b->buf = grown;
        b->cap = cap;
    }
    return true;
}

void textbuf_append(textbuf_t *b, const char *p, size_t n)
{
    if (!textbuf_room(b, n))
        return;
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

void textbuf_printf(textbuf_t *b, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2 && !b->failed; attempt++) { /* into the room there is, else grown */
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(room ? b->buf + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        textbuf_room(b, (size_t)n + 1); /* vsnprintf writes the NUL too */
    }
}

void textbuf_safe(textbuf_t *b, span_t s)
{
    for (size_t i = 0; i < s.len; i++)
        assert(s.ptr[i] != '"' && s.ptr[i] != '\\' && (unsigned char)s.ptr[i] >= 0x20);
    textbuf_lit(b, "\"");
    textbuf_append(b, s.ptr, s.len);
    textbuf_lit(b, "\"");
}

void textbuf_uint(textbuf_t *b, uint64_t u)
{
    char digits[24];
    size_t n = sizeof digits;
    do {
        digits[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    textbuf_append(b, digits + n, sizeof digits - n);
}

void textbuf_int(textbuf_t *b, int64_t v)
{
    if (v < 0) {
        textbuf_lit(b, "-");
        textbuf_uint(b, (uint64_t)0 - (uint64_t)v);
        return;
    }
    textbuf_uint(b, (uint64_t)v);
}

char *textbuf_finish(textbuf_t *b, size_t *len)
{
    textbuf_append(b, "", 1);
    if (b->failed) {
        free(b->buf);
        *b = (textbuf_t){0};
        return NULL;
    }
    char *text = b->buf;
    *len = b->len - 1;
    *b = (textbuf_t){0};
    return text;
}
