/* itemjson.h — the read answer's fixed shape, rendered into one buffer:
 *   {"item":"v1","counts":{"like":10,"dislike":2},"viewer":{"reaction":"like","version":3}}
 * A feed page is 100 of these; building them as jansson object trees cost most of a page's CPU
 * (allocations and stdio number formatting; bench/RESULTS.md). Every string here is an item id or
 * a kind name, whose alphabets need no JSON escaping (asserted), and the output is byte for byte
 * what jansson's compact dump gives (tests/unit checks both against each other). */
#ifndef TALLY_CORE_ITEMJSON_H
#define TALLY_CORE_ITEMJSON_H

#include <stdint.h>

#include "core/kinds.h"
#include "core/reaction.h"

typedef struct {
    char *buf; /* malloc'd; not NUL-terminated */
    size_t len, cap;
    bool failed; /* out of memory at some point: the text is incomplete */
} textbuf_t;

void textbuf_append(textbuf_t *b, const char *p, size_t n);

/* Appends one item object; viewer NULL leaves the viewer member out. */
void itemjson_append(textbuf_t *b, const kinds_t *kinds, span_t item, const int64_t counts[KINDS_MAX + 1],
                     const reaction_row_t *viewer);

#endif
