/* test_histogram.c — the latency histogram (core/histogram.h). */

#include "core/histogram.h"
#include "unit.h"

void test_histogram(void)
{
    static histogram_t h;
    const double bounds[] = {1, 10};
    histogram_init(&h, bounds, 2);
    histogram_observe(&h, 0.5);
    histogram_observe(&h, 1);
    histogram_observe(&h, 5);
    histogram_observe(&h, 50);
    CHECK(atomic_load(&h.counts[0]) == 2 && atomic_load(&h.counts[1]) == 1 && atomic_load(&h.counts[2]) == 1);
    CHECK(atomic_load(&h.count) == 4 && atomic_load(&h.sum) == 56.5);
}
