/* changejson.h — one change-feed entry as JSON: the one shape of a transition that GET /v1/changes
 * pages and webhook deliveries both carry, so a change of that shape reaches both at once. */
#ifndef TALLY_CORE_CHANGEJSON_H
#define TALLY_CORE_CHANGEJSON_H

#include <jansson.h>
#include <stdint.h>

#include "core/kinds.h"
#include "core/reaction.h"
#include "core/textbuf.h"

/* ISO 8601 UTC with milliseconds: 2026-11-29T20:01:02.345Z. */
void changejson_iso_time(uint64_t at_ms, char out[32]);

/* The time as an ISO string, or JSON null when ms is 0 (not set); a new reference. */
json_t *changejson_time_json(uint64_t ms);

/* {"cursor":"<seq>","item":…,"user":…,"from":…,"to":…,"version":…,"at":…} for the log entry seq; a
 * new reference, NULL when out of memory. Any thread. */
json_t *changejson_entry(const kinds_t *kinds, uint64_t seq, const transition_t *t);

/* The same entry appended as text, byte for byte what json_dumps(changejson_entry(…), JSON_COMPACT)
 * gives (tests/unit checks it): what pages and deliveries render, 100 at a time. Any thread. */
void changejson_append(textbuf_t *b, const kinds_t *kinds, uint64_t seq, const transition_t *t);

/* The same for an entry of shard `shard` of a cluster of `count` shards: its cursor is the entry
 * cursor (core/shardmap.h: with one shard the decimal position, as changejson_append writes it;
 * with more "S.P"). Any thread. */
void changejson_append_shard(textbuf_t *b, const kinds_t *kinds, uint32_t count, uint32_t shard, uint64_t seq,
                             const transition_t *t);

#endif
