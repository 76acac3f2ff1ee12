/* fuzz.h — helpers shared by the libFuzzer targets: property checks that abort with a message. */
#ifndef TALLY_FUZZ_FUZZ_H
#define TALLY_FUZZ_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/span.h"

/* A property the code under test promises; a violation is a crash libFuzzer saves as a reproducer. */
#define FUZZ_ASSERT(cond)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond);                              \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

/* True when s is empty or lies wholly inside [base, base + len). */
static inline bool fuzz_span_within(span_t s, const char *base, size_t len)
{
    if (s.len == 0)
        return true;
    uintptr_t p = (uintptr_t)s.ptr, b = (uintptr_t)base;
    return p >= b && s.len <= len && p - b <= len - s.len;
}

/* A NUL-terminated heap copy of the input, for the parsers that take C strings (cut at the first NUL,
 * as a C string is). The caller frees it. */
static inline char *fuzz_cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

static inline bool fuzz_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

#endif
