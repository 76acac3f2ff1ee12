/* slotindex.h — the index of a growing array of entries for open addressing with linear probing:
 * slots[s] is entry index + 1, 0 an empty slot. Shared by the item map and the lists' pair map. */
#ifndef TALLY_CORE_SLOTINDEX_H
#define TALLY_CORE_SLOTINDEX_H

#include <stddef.h>
#include <stdint.h>

/* The hash of entry i of the caller's array. */
typedef uint64_t (*slotindex_hash_fn)(const void *entries, size_t i);

/* Replaces *slots with a new index of nslots (a power of two, more than count) slots holding entries
 * 0..count-1. Returns 0, or -1 when out of memory (the old index is kept). */
int slotindex_rebuild(uint32_t **slots, size_t *nslots_out, size_t nslots, const void *entries, size_t count,
                      slotindex_hash_fn hash);

#endif
