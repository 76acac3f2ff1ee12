/* sse.c — server-sent event text. Every string in it is an id, a kind name or a number, so no line
 * break can get into a data line (which would end the event early). */
#include "core/sse.h"

#include <inttypes.h>
#include <stdio.h>

void sse_retry(textbuf_t *b, unsigned ms)
{
    textbuf_printf(b, "retry: %u\n\n", ms);
}

void sse_counts_event(textbuf_t *b, uint64_t cursor, const kinds_t *kinds, span_t item,
                      const int64_t counts[KINDS_MAX + 1])
{
    sse_counts_event_policy(b, cursor, kinds, item, counts, NULL);
}

void sse_counts_event_policy(textbuf_t *b, uint64_t cursor, const kinds_t *kinds, span_t item,
                             const int64_t counts[KINDS_MAX + 1], const policy_t *policy)
{
    char id[24];
    int len = snprintf(id, sizeof id, "%" PRIu64, cursor);
    sse_counts_event_id(b, (span_t){id, (size_t)len}, kinds, item, counts, policy);
}

void sse_counts_event_id(textbuf_t *b, span_t id, const kinds_t *kinds, span_t item,
                         const int64_t counts[KINDS_MAX + 1], const policy_t *policy)
{
    textbuf_lit(b, "id: ");
    textbuf_append(b, id.ptr, id.len);
    textbuf_lit(b, "\nevent: counts\ndata: ");
    itemjson_append_policy(b, kinds, item, counts, NULL, policy, false);
    textbuf_lit(b, "\n\n");
}
