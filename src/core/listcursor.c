/* listcursor.c — "<seq>.<name>" cursors of the list pages. */
#include "core/listcursor.h"

#include <stdio.h>
#include <string.h>

#include "core/parse.h"

size_t list_cursor_format(char out[LIST_CURSOR_MAX], uint64_t seq, span_t name)
{
    int n = snprintf(out, LIST_CURSOR_MAX, "%llu.%.*s", (unsigned long long)seq, (int)name.len, name.ptr);
    return n > 0 ? (size_t)n : 0;
}

int list_cursor_parse(span_t text, uint64_t *seq, span_t *name)
{
    const char *dot = text.len ? memchr(text.ptr, '.', text.len) : NULL;
    if (!dot)
        return -1;
    span_t digits = {text.ptr, (size_t)(dot - text.ptr)};
    *name = (span_t){dot + 1, text.len - digits.len - 1};
    if (digits.len == 0 || (digits.len > 1 && digits.ptr[0] == '0') || parse_uint(digits, UINT64_MAX, seq) != 0)
        return -1;
    return id_valid(*name) ? 0 : -1;
}
