/* hash.h — one 64-bit hash of bytes for the in-memory tables (not for anything an attacker
 * could aim at a single bucket: the tables it serves degrade gracefully, never wrongly). */
#ifndef TALLY_CORE_HASH_H
#define TALLY_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_SEED 1469598103934665603ull

/* FNV-1a over p[0..n), continuing from h (HASH_SEED to start): chain calls to hash several spans. */
static inline uint64_t hash_bytes(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* A final mix (MurmurHash3's), so that every output bit depends on every input bit. */
static inline uint64_t hash_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

#endif
