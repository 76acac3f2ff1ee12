/* sse.c — server-sent event text. Every string in it is an id, a kind name or a number, so no line
 * break can get into a data line (which would end the event early). */
#include "core/sse.h"

#include <inttypes.h>
#include <stdio.h>

void sse_retry(textbuf_t *b, unsigned ms)
{
    char line[32];
    int n = snprintf(line, sizeof line, "retry: %u\n\n", ms);
    textbuf_append(b, line, (size_t)n);
}

void sse_counts_event(textbuf_t *b, uint64_t cursor, const kinds_t *kinds, span_t item,
                      const int64_t counts[KINDS_MAX + 1])
{
    char head[64];
    int n = snprintf(head, sizeof head, "id: %" PRIu64 "\nevent: counts\ndata: ", cursor);
    textbuf_append(b, head, (size_t)n);
    itemjson_append(b, kinds, item, counts, NULL);
    textbuf_append(b, "\n\n", 2);
}
