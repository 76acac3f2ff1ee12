/* test_sketch.c — Space-Saving against exact counts on a skewed stream. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spacesaving.h"
#include "unit.h"

#define ITEMS 5000
#define EVENTS 200000
#define CAPACITY 256

/* A Zipf(1.1)-like draw over ITEMS items from a fixed linear congruential sequence. */
static int zipf_draw(uint64_t *state, const double *cdf)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*state >> 11) / 9007199254740992.0;
    int lo = 0, hi = ITEMS - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void test_spacesaving(void)
{
    static double cdf[ITEMS];
    static uint64_t exact[ITEMS];
    double sum = 0;
    for (int i = 0; i < ITEMS; i++)
        sum += 1.0 / pow(i + 1, 1.1);
    double acc = 0;
    for (int i = 0; i < ITEMS; i++) {
        acc += 1.0 / pow(i + 1, 1.1) / sum;
        cdf[i] = acc;
    }
    spacesaving_t s;
    CHECK(ss_init(&s, CAPACITY) == 0);
    uint64_t state = 42;
    char name[16];
    for (int e = 0; e < EVENTS; e++) {
        int i = zipf_draw(&state, cdf);
        exact[i]++;
        snprintf(name, sizeof name, "item%d", i);
        ss_add(&s, span_of(name), 1);
    }
    CHECK(s.total == EVENTS && s.n == CAPACITY);
    double bound = (double)EVENTS / CAPACITY;
    int violations = 0, tracked_top = 0;
    for (int i = 0; i < ITEMS; i++) {
        snprintf(name, sizeof name, "item%d", i);
        const ss_counter_t *c = ss_find(&s, span_of(name));
        if (c) {
            /* estimate − error ≤ true ≤ estimate, and estimate − true ≤ N/K */
            if (!(c->count >= exact[i] && c->count - c->error <= exact[i] && (double)(c->count - exact[i]) <= bound))
                violations++;
        } else if ((double)exact[i] > bound) {
            violations++; /* every item above N/K must be tracked */
        }
        if (i < 10 && c)
            tracked_top++;
    }
    CHECK(violations == 0);
    /* The index agrees with the heap: every counter is found at its own place, and the index holds
     * exactly n entries (a stale or duplicate slot once filled it until lookups never ended). */
    size_t indexed = 0;
    for (size_t i = 0; i < s.nslots; i++)
        indexed += s.slots[i] != 0;
    CHECK(indexed == s.n);
    int misplaced = 0;
    for (size_t i = 0; i < s.n; i++)
        misplaced += ss_find(&s, (span_t){s.heap[i].item, s.heap[i].item_len}) != &s.heap[i];
    CHECK(misplaced == 0);
    int unordered = 0; /* the min-heap order holds */
    for (size_t i = 1; i < s.n; i++)
        unordered += s.heap[(i - 1) / 2].count > s.heap[i].count;
    CHECK(unordered == 0);
    CHECK(tracked_top == 10);
    CHECK(ss_min(&s) <= (uint64_t)bound);

    /* Encoding round-trips. */
    uint8_t *buf;
    size_t len;
    spacesaving_t back;
    CHECK(ss_encode(&s, &buf, &len) == 0);
    CHECK(ss_decode(&back, CAPACITY, buf, len) == 0);
    CHECK(back.total == s.total && back.n == s.n);
    const ss_counter_t *a = ss_find(&s, SPAN_LIT("item0")), *b = ss_find(&back, SPAN_LIT("item0"));
    CHECK(a && b && a->count == b->count && a->error == b->error);
    ss_free(&back);
    CHECK(ss_decode(&back, CAPACITY, buf, len - 1) != 0); /* truncated: refused */
    buf[0] ^= 0xff;
    spacesaving_t bad;
    CHECK(ss_decode(&bad, CAPACITY, buf, len) != 0);
    free(buf);

    ss_free(&s);
}
