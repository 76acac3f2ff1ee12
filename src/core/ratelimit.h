/* ratelimit.h — token buckets per key (a user, a client address) in a fixed-size table: memory
 * is bounded by configuration, not by the number of keys. An idle bucket refills to full, which is
 * the same as no bucket, so idle entries are simply overwritten when a new key needs the room. */
#ifndef TALLY_CORE_RATELIMIT_H
#define TALLY_CORE_RATELIMIT_H

#include <pthread.h>
#include <stdint.h>

#include "core/span.h"

#define RATELIMIT_SHARDS 64
#define RATELIMIT_PROBE 16 /* slots looked at per key */

typedef struct {
    double rate_per_s; /* 0 = off */
    double burst;
} ratelimit_rule_t;

/* "20/s", "20/s:40" (burst defaults to twice the rate), "off". Returns 0, or -1 when malformed. */
int ratelimit_parse(const char *text, ratelimit_rule_t *rule);

typedef struct ratelimit ratelimit_t;

/* A table of at most capacity buckets (rounded up to a multiple of the shards) in *out. Returns 0,
 * with *out NULL when the rule is off (rule.rate_per_s == 0): ratelimit_take on NULL always
 * allows. Returns -1 when out of memory (*out NULL): the caller must not run without the limit it
 * was asked for. */
int ratelimit_new(ratelimit_rule_t rule, size_t capacity, ratelimit_t **out);
void ratelimit_free(ratelimit_t *rl);

/* A new rule for the table (a reload): rate 0 turns it off until a later rule turns it on again;
 * buckets above the new burst are cut to it. Any thread. */
void ratelimit_set_rule(ratelimit_t *rl, ratelimit_rule_t rule);
ratelimit_rule_t ratelimit_rule(ratelimit_t *rl);

/* Takes one token from key's bucket at now_ms. Returns 0 when allowed, else the whole seconds
 * (at least 1) until a token is there (for Retry-After). Any thread. */
unsigned ratelimit_take(ratelimit_t *rl, span_t key, uint64_t now_ms);

#endif
