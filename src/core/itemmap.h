/* itemmap.h — per-item delta sums: the in-memory table that turns many transitions of one item
 * into one counts update (pipeline) and that recount uses for the not-yet-folded log. */
#ifndef TALLY_CORE_ITEMMAP_H
#define TALLY_CORE_ITEMMAP_H

#include <stdint.h>

#include "core/ids.h"
#include "core/kinds.h"

typedef struct {
    char item[ID_MAX_LEN];
    size_t item_len;
    int64_t deltas[KINDS_MAX + 1];
} itemmap_entry_t;

typedef struct {
    itemmap_entry_t *entries; /* in insertion order */
    size_t count, cap;
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t nslots;
} itemmap_t;

/* The entry of item, created with zero deltas if new; NULL when out of memory or item is longer
 * than ID_MAX_LEN. */
itemmap_entry_t *itemmap_get(itemmap_t *m, span_t item);

/* The entry of item, or NULL when absent. */
itemmap_entry_t *itemmap_find(const itemmap_t *m, span_t item);

/* True when every delta of e is zero. */
bool itemmap_entry_is_zero(const itemmap_entry_t *e);

/* Forgets every entry, keeping the memory. */
void itemmap_clear(itemmap_t *m);

void itemmap_free(itemmap_t *m);

#endif
