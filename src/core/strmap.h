/* strmap.h — a table from short names (ids, client addresses: at most ID_MAX_LEN bytes) to a
 * 64-bit value, with deletion: the live streams' subscriptions (item → subscribers) and their
 * per-client counts. Open addressing, linear probing, backward-shift deletion (no tombstones), so
 * memory follows the names present now, not every name ever seen. Not thread-safe. */
#ifndef TALLY_CORE_STRMAP_H
#define TALLY_CORE_STRMAP_H

#include <stdint.h>

#include "core/ids.h"
#include "core/span.h"

typedef struct {
    char key[ID_MAX_LEN];
    uint8_t len;
    bool used;
    uint64_t value;
} strmap_slot_t;

typedef struct {
    strmap_slot_t *slots;
    size_t nslots; /* a power of two, or 0 */
    size_t count;
} strmap_t;

/* The value of key, created as 0 when absent; NULL when out of memory or key is empty or longer
 * than ID_MAX_LEN. The pointer is valid until the next strmap_get or strmap_delete. */
uint64_t *strmap_get(strmap_t *m, span_t key);

/* The value of key, or NULL when absent. */
uint64_t *strmap_find(const strmap_t *m, span_t key);

/* Removes key (nothing when absent). */
void strmap_delete(strmap_t *m, span_t key);

void strmap_free(strmap_t *m);

#endif
