/* router_cost.c — the CPU a sharded node would spend routing one write: the virtual shard of the id
 * (zlib CRC-32 mod 4096) and the map lookup, timed over many realistic ids, beside two costs measured
 * in the same run for scale: a memcpy of the id, and the SHA-256 request fingerprint tally already
 * computes for every keyed write. Prints ns per operation, min and median of the runs.
 *
 * Usage: router_cost [ids [runs [shards]]]   (defaults 1000000 5 4). Single-threaded, no I/O. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fingerprint.h"
#include "core/shardmap.h"

typedef struct {
    char *bytes;
    size_t *off; /* id i is bytes[off[i] .. off[i + 1]) */
    size_t count;
} ids_t;

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: deterministic, so every run routes the same ids */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Ids as clients send them: a kind prefix and a number ("post-123456"), some with a path-like or
 * UUID-like tail, lengths 8..64. */
static int ids_make(ids_t *ids, size_t count)
{
    static const char *const kinds[] = {"post-", "comment-", "video-", "article:", "thread/"};
    static const char hex[] = "0123456789abcdef";
    ids->bytes = malloc(count * 64);
    ids->off = malloc((count + 1) * sizeof *ids->off);
    if (!ids->bytes || !ids->off)
        return -1;
    ids->count = count;
    uint64_t s = 42;
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        ids->off[i] = at;
        uint64_t r = rng_next(&s);
        char buf[80];
        int n = snprintf(buf, sizeof buf, "%s%llu", kinds[r % 5], (unsigned long long)(r >> 8) % 100000000ull);
        size_t want = 8 + (size_t)((r >> 40) % 57); /* 8..64 */
        while ((size_t)n < want) {
            buf[n] = (n % 9 == 0) ? '-' : hex[rng_next(&s) & 15];
            n++;
        }
        if ((size_t)n > want)
            n = (int)want;
        memcpy(ids->bytes + at, buf, (size_t)n);
        at += (size_t)n;
    }
    ids->off[count] = at;
    return 0;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { OP_ROUTE, OP_MEMCPY, OP_FINGERPRINT, OP_COUNT };
static const char *const op_names[OP_COUNT] = {
    "route (crc32 mod 4096 + map)",
    "memcpy of the id",
    "SHA-256 request fingerprint",
};

static volatile uint64_t sink; /* keeps the work observable */

/* One pass of op over every id: ns per id. */
static double pass(int op, const ids_t *ids, const shard_map_t *map)
{
    uint64_t acc = 0;
    char copy[64];
    char path[128];
    static const char body[] = "{\"user\":\"u-1234567\",\"reaction\":\"like\"}";
    double t0 = now_ns();
    for (size_t i = 0; i < ids->count; i++) {
        span_t id = {ids->bytes + ids->off[i], ids->off[i + 1] - ids->off[i]};
        if (op == OP_ROUTE) {
            acc += shard_map_of_id(map, id);
        } else if (op == OP_MEMCPY) {
            memcpy(copy, id.ptr, id.len);
            acc += (uint8_t)copy[id.len - 1];
        } else {
            /* what a keyed write digests: its method, its path (which names the id) and its body */
            int n = snprintf(path, sizeof path, "/v1/items/%.*s/reactions", (int)id.len, id.ptr);
            uint8_t fp[FINGERPRINT_LEN];
            if (fingerprint_request(SPAN_LIT("POST"), (span_t){path, (size_t)n}, SPAN_LIT(body), fp) != 0)
                abort();
            acc += fp[0];
        }
    }
    double t1 = now_ns();
    sink += acc;
    return (t1 - t0) / (double)ids->count;
}

int main(int argc, char **argv)
{
    size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    uint32_t shards = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 4;
    if (count == 0 || runs <= 0 || runs > 100) {
        fprintf(stderr, "usage: router_cost [ids [runs [shards]]]\n");
        return 2;
    }
    ids_t ids;
    shard_map_t map;
    if (ids_make(&ids, count) != 0 || shard_map_even(&map, shards) != 0) {
        fprintf(stderr, "router_cost: out of memory or bad shard count\n");
        return 2;
    }

    /* the split the model assumes: how evenly CRC-32 spreads these ids over the shards */
    uint64_t per[SHARD_MAX] = {0};
    for (size_t i = 0; i < ids.count; i++)
        per[shard_map_of_id(&map, (span_t){ids.bytes + ids.off[i], ids.off[i + 1] - ids.off[i]})]++;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t s = 0; s < shards; s++) {
        lo = per[s] < lo ? per[s] : lo;
        hi = per[s] > hi ? per[s] : hi;
    }
    double mean = (double)ids.count / shards;
    printf("ids %zu (mean length %.1f bytes), runs %d, shards %u: ids per shard min %llu max %llu "
           "(%.2f%% / +%.2f%% of the mean)\n",
           ids.count, (double)ids.off[ids.count] / (double)ids.count, runs, shards, (unsigned long long)lo,
           (unsigned long long)hi, 100.0 * ((double)lo - mean) / mean, 100.0 * ((double)hi - mean) / mean);
    /* writes rather than ids: the bench's load draws items Zipf(s=1.1) over their ranks (id i = rank
     * i + 1 here), so a shard's share of writes also depends on where the hottest few items land */
    double wsum[SHARD_MAX] = {0}, wall = 0;
    for (size_t i = 0; i < ids.count; i++) {
        double w = pow((double)(i + 1), -1.1);
        wsum[shard_map_of_id(&map, (span_t){ids.bytes + ids.off[i], ids.off[i + 1] - ids.off[i]})] += w;
        wall += w;
    }
    double wlo = 1e300, whi = 0;
    for (uint32_t s = 0; s < shards; s++) {
        wlo = wsum[s] < wlo ? wsum[s] : wlo;
        whi = wsum[s] > whi ? wsum[s] : whi;
    }
    printf("Zipf(1.1) writes per shard: min %.2f%% max %.2f%% of all (even: %.2f%%); the hottest id alone %.2f%%\n",
           100.0 * wlo / wall, 100.0 * whi / wall, 100.0 / shards, 100.0 / wall);

    double t[OP_COUNT][100];
    for (int r = 0; r < runs; r++) /* interleaved, so a noisy neighbour hits every op alike */
        for (int op = 0; op < OP_COUNT; op++)
            t[op][r] = pass(op, &ids, &map);
    double med[OP_COUNT];
    for (int op = 0; op < OP_COUNT; op++) {
        qsort(t[op], (size_t)runs, sizeof t[op][0], cmp_double);
        med[op] = t[op][runs / 2];
        printf("%-30s ns/op min %8.1f median %8.1f\n", op_names[op], t[op][0], med[op]);
    }
    printf("route / memcpy (median) %.2f; route / fingerprint (median) %.3f\n", med[OP_ROUTE] / med[OP_MEMCPY],
           med[OP_ROUTE] / med[OP_FINGERPRINT]);
    free(ids.bytes);
    free(ids.off);
    return 0;
}
