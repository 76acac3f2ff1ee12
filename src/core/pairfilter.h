/* pairfilter.h — which (item, user) pairs have a reaction row, answered from memory: a blocked Bloom
 * filter. "No" is certain (there are no false negatives); "maybe" is wrong for about 1 pair in 100
 * while the filter holds fewer than one pair per 10 bits, and degrades slowly past that. Each pair
 * sets one bit in each of the 8 words of one 64-byte block, so a lookup reads one cache line.
 *
 * Concurrency: adds and lookups may run at once from any threads (atomic words). A reader that must
 * see every pair added before some event (a commit) needs that event to order the adds before its
 * lookups (a release fence after the adds, an acquire fence before the lookups). */
#ifndef TALLY_CORE_PAIRFILTER_H
#define TALLY_CORE_PAIRFILTER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/span.h"

typedef struct {
    _Atomic uint64_t *words; /* nblocks * 8 */
    uint64_t nblocks;        /* a power of two; 0 = no filter */
} pairfilter_t;

/* Allocates about bytes (rounded down to a power of two, at least one block). Returns 0, or -1 when
 * out of memory. bytes 0 makes an empty filter that answers "maybe" to everything. */
int pairfilter_init(pairfilter_t *f, uint64_t bytes);
void pairfilter_free(pairfilter_t *f);

void pairfilter_add(pairfilter_t *f, span_t item, span_t user);
bool pairfilter_may_contain(const pairfilter_t *f, span_t item, span_t user);

#endif
