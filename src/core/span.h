/* span.h — a borrowed byte range (pointer + length); the unit of every id and header value. */
#ifndef TALLY_CORE_SPAN_H
#define TALLY_CORE_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    const char *ptr;
    size_t len;
} span_t;

#define SPAN_LIT(s) ((span_t){(s), sizeof(s) - 1})

static inline span_t span_of(const char *s)
{
    return (span_t){s, s ? strlen(s) : 0};
}

static inline bool span_eq(span_t a, span_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static inline bool span_eq_str(span_t a, const char *s)
{
    return span_eq(a, span_of(s));
}

#endif
