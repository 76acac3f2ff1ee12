/* feed.h — wakes change-feed long polls when new transitions commit (or their wait runs out).
 * Its own thread does the waiting, so that no HTTP thread blocks and no snapshot is held while a
 * poll waits: a woken waiter reads its page with a fresh snapshot. */
#ifndef TALLY_ENGINE_FEED_H
#define TALLY_ENGINE_FEED_H

#include <stdint.h>

#include "store/store.h"

typedef struct feed feed_t;
typedef struct feed_waiter feed_waiter_t;

/* Called on the feed thread when the waiter's log has entries after its cursor, its deadline
 * passed, or the feed is stopping. The waiter is gone after the call. */
typedef void (*feed_wake_fn)(void *arg);

int feed_start(store_t *store, feed_t **out);

/* Any thread: the writer committed new transitions. */
void feed_notify(void *feed);

/* Registers a wait for entries after seq `after`, for at most wait_ms. Returns 0, or -1 when the
 * feed is stopping (wake is not called). */
int feed_wait(feed_t *f, uint64_t after, uint64_t wait_ms, feed_wake_fn wake, void *arg);

/* Wakes every waiter now and refuses new ones; then joins the thread. feed_notify stays safe to
 * call (the writer may still commit) until feed_free, after the writer has stopped. */
void feed_stop(feed_t *f);
void feed_free(feed_t *f);

#endif
