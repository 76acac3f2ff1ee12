/* histogram.h — a fixed-bucket histogram with atomic counters (Prometheus semantics: cumulative
 * buckets are computed when rendered). Safe to observe from any thread. */
#ifndef TALLY_CORE_HISTOGRAM_H
#define TALLY_CORE_HISTOGRAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HISTOGRAM_MAX_BUCKETS 24

typedef struct {
    size_t nbounds;
    double bounds[HISTOGRAM_MAX_BUCKETS]; /* upper bounds, ascending; +Inf is implicit */
    atomic_uint_fast64_t counts[HISTOGRAM_MAX_BUCKETS + 1];
    atomic_uint_fast64_t count;
    _Atomic double sum;
} histogram_t;

/* Sets the bucket bounds (ascending, at most HISTOGRAM_MAX_BUCKETS). */
void histogram_init(histogram_t *h, const double *bounds, size_t nbounds);
void histogram_observe(histogram_t *h, double value);

#endif
