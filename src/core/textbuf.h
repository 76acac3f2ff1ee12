/* textbuf.h — JSON text rendered straight into one growing buffer, for the shapes that are built
 * many times a second (feed pages, change-feed entries, webhook batches): building them as jansson
 * trees cost most of their CPU (allocations and stdio number formatting; bench/RESULTS.md). Every
 * string written with textbuf_safe is an id, a kind name or a fixed word, whose alphabets need no
 * JSON escaping (asserted); the renderers built on this are tested byte for byte against jansson's
 * compact dump of the same object. */
#ifndef TALLY_CORE_TEXTBUF_H
#define TALLY_CORE_TEXTBUF_H

#include <stdint.h>

#include "core/span.h"

typedef struct {
    char *buf; /* malloc'd; not NUL-terminated (textbuf_finish adds one) */
    size_t len, cap;
    bool failed; /* out of memory at some point: the text is incomplete */
} textbuf_t;

void textbuf_append(textbuf_t *b, const char *p, size_t n);
#define textbuf_lit(b, s) textbuf_append((b), "" s, sizeof("" s) - 1) /* s: a string literal */
/* A JSON string from an alphabet that never needs escaping (validated where it entered). */
void textbuf_safe(textbuf_t *b, span_t s);
void textbuf_int(textbuf_t *b, int64_t v);
void textbuf_uint(textbuf_t *b, uint64_t v);
/* printf-style text (what is not on a hot path: the metrics page, event heads). */
void textbuf_printf(textbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* NUL-terminates and hands the text over (the caller frees it); NULL when anything failed. */
char *textbuf_finish(textbuf_t *b, size_t *len);

#endif
