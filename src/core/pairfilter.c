/* pairfilter.c — a split-block Bloom filter over (item, user) pairs. */
#include "core/pairfilter.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/hash.h"

#define BLOCK_WORDS 8
#define BLOCK_BYTES (BLOCK_WORDS * sizeof(uint64_t))

int pairfilter_init(pairfilter_t *f, uint64_t bytes)
{
    *f = (pairfilter_t){0};
    if (bytes == 0)
        return 0;
    uint64_t nblocks = 1;
    while (nblocks * 2 * BLOCK_BYTES <= bytes)
        nblocks *= 2;
    size_t size = (size_t)(nblocks * BLOCK_BYTES);
    void *mem = aligned_alloc(BLOCK_BYTES, size);
    if (!mem)
        return -1;
    madvise(mem, size, MADV_HUGEPAGE); /* fewer TLB misses on a large table; a hint only */
    memset(mem, 0, size);
    f->words = mem;
    f->nblocks = nblocks;
    return 0;
}

void pairfilter_free(pairfilter_t *f)
{
    free((void *)f->words);
    *f = (pairfilter_t){0};
}

/* The pair's hash: [len][item][user], as the store keys its rows (so "ab"+"c" and "a"+"bc" differ). */
static uint64_t pair_hash(span_t item, span_t user)
{
    char len = (char)item.len;
    uint64_t h = hash_bytes(HASH_SEED, &len, 1);
    h = hash_bytes(h, item.ptr, item.len);
    return hash_mix(hash_bytes(h, user.ptr, user.len));
}

/* The block, from the low bits of h; one bit in each word from 6-bit slices of a second hash. */
static _Atomic uint64_t *block_of(const pairfilter_t *f, uint64_t h)
{
    return f->words + (h & (f->nblocks - 1)) * BLOCK_WORDS;
}

static uint64_t bit(uint64_t h2, int word)
{
    return 1ull << ((h2 >> (6 * word)) & 63);
}

void pairfilter_add(pairfilter_t *f, span_t item, span_t user)
{
    if (!f->nblocks)
        return;
    uint64_t h = pair_hash(item, user), h2 = hash_mix(h ^ 0x9e3779b97f4a7c15ull);
    _Atomic uint64_t *b = block_of(f, h);
    for (int i = 0; i < BLOCK_WORDS; i++)
        if (!(atomic_load_explicit(&b[i], memory_order_relaxed) & bit(h2, i)))
            atomic_fetch_or_explicit(&b[i], bit(h2, i), memory_order_relaxed);
}

bool pairfilter_may_contain(const pairfilter_t *f, span_t item, span_t user)
{
    if (!f->nblocks)
        return true;
    uint64_t h = pair_hash(item, user), h2 = hash_mix(h ^ 0x9e3779b97f4a7c15ull);
    _Atomic uint64_t *b = block_of(f, h);
    for (int i = 0; i < BLOCK_WORDS; i++)
        if (!(atomic_load_explicit(&b[i], memory_order_relaxed) & bit(h2, i)))
            return false;
    return true;
}
