/* slotindex.c — rebuilding an open-addressing index over an array of entries. */
#include "core/slotindex.h"

#include <stdlib.h>

int slotindex_rebuild(uint32_t **slots, size_t *nslots_out, size_t nslots, const void *entries, size_t count,
                      slotindex_hash_fn hash)
{
    uint32_t *fresh = calloc(nslots, sizeof *fresh);
    if (!fresh)
        return -1;
    for (size_t i = 0; i < count; i++) {
        size_t s = hash(entries, i) & (nslots - 1);
        while (fresh[s])
            s = (s + 1) & (nslots - 1);
        fresh[s] = (uint32_t)(i + 1);
    }
    free(*slots);
    *slots = fresh;
    *nslots_out = nslots;
    return 0;
}
