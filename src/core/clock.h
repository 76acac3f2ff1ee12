/* clock.h — the clocks tally reads: wall time for what is stored and shown (commit times),
 * monotonic time for intervals, deadlines and rate limits. */
#ifndef TALLY_CORE_CLOCK_H
#define TALLY_CORE_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline uint64_t wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}
static inline uint64_t mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The absolute time ms from now on clock id, for pthread_cond_timedwait (whose condition variable
 * must use the same clock). */
static inline struct timespec clock_deadline(clockid_t id, uint64_t ms)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* A condition variable whose timed waits use the monotonic clock (pair with clock_deadline). */
static inline void clock_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

#endif
