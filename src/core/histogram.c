/* histogram.c — lock-free observation into fixed buckets. */
#include "core/histogram.h"

#include <assert.h>
#include <string.h>

void histogram_init(histogram_t *h, const double *bounds, size_t nbounds)
{
    assert(nbounds <= HISTOGRAM_MAX_BUCKETS);
    memset(h, 0, sizeof *h);
    h->nbounds = nbounds;
    memcpy(h->bounds, bounds, nbounds * sizeof *bounds);
}

void histogram_observe(histogram_t *h, double value)
{
    size_t i = 0;
    while (i < h->nbounds && value > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    double old = atomic_load_explicit(&h->sum, memory_order_relaxed);
    while (
        !atomic_compare_exchange_weak_explicit(&h->sum, &old, old + value, memory_order_relaxed, memory_order_relaxed))
        ;
}
