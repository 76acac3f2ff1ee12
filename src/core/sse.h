/* sse.h — the text of the live stream (the HTML standard's server-sent events, docs/api.md § Live
 * counts): the retry line that opens a stream, one counts event, the keep-alive comment. Pure. */
#ifndef TALLY_CORE_SSE_H
#define TALLY_CORE_SSE_H

#include <stdint.h>

#include "core/itemjson.h"

#define SSE_RETRY_MS 2000 /* what a browser waits before reconnecting a dropped stream */
#define SSE_KEEPALIVE ": keep-alive\n\n"

/* "retry: <ms>\n\n" */
void sse_retry(textbuf_t *b, unsigned ms);

/* "id: <cursor>\nevent: counts\ndata: {"item":…,"counts":{…}}\n\n" — the item object of a read
 * (itemjson, without viewer); cursor is the change-feed position the counts are folded up to. */
/* With the item's policy (NULL: none): its member, and counts null when it hides them (a stream is
 * public). */
void sse_counts_event_policy(textbuf_t *b, uint64_t cursor, const kinds_t *kinds, span_t item,
                             const int64_t counts[KINDS_MAX + 1], const policy_t *policy);
void sse_counts_event(textbuf_t *b, uint64_t cursor, const kinds_t *kinds, span_t item,
                      const int64_t counts[KINDS_MAX + 1]);
/* The same with the id given as text: an entry cursor of several shards ("S.P", core/shardmap.h). */
void sse_counts_event_id(textbuf_t *b, span_t id, const kinds_t *kinds, span_t item,
                         const int64_t counts[KINDS_MAX + 1], const policy_t *policy);

#endif
