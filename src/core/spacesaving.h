/* spacesaving.h — the Space-Saving heavy-hitter summary (Metwally et al.): at most capacity
 * counters; an item not tracked takes the place of the smallest, inheriting its count. For every
 * item, estimate − error ≤ true count ≤ estimate, and estimate − true ≤ total / capacity. */
#ifndef TALLY_CORE_SPACESAVING_H
#define TALLY_CORE_SPACESAVING_H

#include <stdint.h>

#include "core/ids.h"

typedef struct {
    char item[ID_MAX_LEN];
    uint8_t item_len;
    uint64_t count; /* estimate */
    uint64_t error; /* overestimation bound of this counter */
} ss_counter_t;

typedef struct {
    size_t capacity;
    size_t n;
    uint64_t total;     /* events added */
    ss_counter_t *heap; /* min-heap on count, n entries, grown up to capacity */
    size_t cap_alloc;   /* entries allocated */
    uint32_t *slots;    /* hash index: heap position + 1; 0 = empty */
    size_t nslots;      /* power of two ≥ 2 × capacity */
} spacesaving_t;

/* Returns 0, or -1 when out of memory. */
int ss_init(spacesaving_t *s, size_t capacity);
void ss_free(spacesaving_t *s);
void ss_clear(spacesaving_t *s);

/* Adds weight (≥ 1) events of item. Returns 0, or -1 when out of memory (nothing added). */
int ss_add(spacesaving_t *s, span_t item, uint64_t weight);

/* The counter of item, or NULL when it is not tracked. */
const ss_counter_t *ss_find(const spacesaving_t *s, span_t item);

/* The smallest count when full (the most an untracked item can have had), else 0. */
uint64_t ss_min(const spacesaving_t *s);

/* Serialises to a malloc'd buffer / restores from one. Return 0 or -1. */
int ss_encode(const spacesaving_t *s, uint8_t **out, size_t *len);
int ss_decode(spacesaving_t *s, size_t capacity, const uint8_t *buf, size_t len);

#endif
