/* live.h — the follower behind live counts (docs/api.md § Live counts). One thread follows the log up
 * to the fold's checkpoint, the way trending follows it: every --live-interval it takes a short
 * snapshot (never held while waiting), reads the checkpoint, the log entries after its position up
 * to that checkpoint, and the counts of the changed items somebody watches, all from that one
 * snapshot, and hands them over with the checkpoint as their cursor. New subscriptions get their
 * items' current counts at once (the next wake-up, not the next interval). Because it reads the
 * shared log and checkpoint, on PostgreSQL every node's streams move, whichever node folds.
 *
 * The engine knows subscriptions only by an opaque token; what a token is (a stream on an HTTP
 * thread) and how the counts travel there is the sink's business (http/live.c). */
#ifndef TALLY_ENGINE_LIVE_H
#define TALLY_ENGINE_LIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/kinds.h"
#include "store/store.h"

#define LIVE_IDS_MAX 100 /* items per subscription, as per batch read */

typedef struct live live_t;

/* One item's counts, as read in a pass. */
typedef struct {
    span_t item;
    const int64_t *counts; /* [KINDS_MAX + 1] */
    /* on_changes: the position of the item's last change read (a subscription whose initial
     * counts were read at or after it has it already); UINT64_MAX when unknown (a resync) */
    uint64_t changed_at;
} live_item_t;

/* Called on the live thread; everything passed is valid only during the call. */
typedef struct {
    /* Watched items whose counts changed since the last pass, folded up to cursor. */
    void (*on_changes)(void *arg, uint64_t cursor, const live_item_t *items, size_t n);
    /* A new subscription's items and their counts, folded up to cursor. Comes after every
     * on_changes whose cursor is below it. */
    void (*on_initial)(void *arg, uint64_t token, uint64_t cursor, const live_item_t *items, size_t n);
    /* Every keep-alive period. */
    void (*on_keepalive)(void *arg);
    void *arg;
} live_sink_t;

typedef struct {
    uint64_t interval_ms;  /* a pass at most this often: an item's changes within it become one event */
    uint64_t keepalive_ms; /* on_keepalive this often */
    /* Optional: a number that rises when what the sink renders for an item changes without a change
     * of its counts (the item policies in force); every watched item is sent again at the next pass. */
    const atomic_uint_fast64_t *render_epoch;
} live_options_t;

#define LIVE_INTERVAL_MS_DEFAULT 250
#define LIVE_KEEPALIVE_MS_DEFAULT 15000

typedef struct {
    atomic_uint_fast64_t passes;       /* snapshots read */
    atomic_uint_fast64_t errors;       /* failed reads of the store */
    atomic_uint_fast64_t cursor;       /* the checkpoint the last pass read */
    atomic_uint_fast64_t watched;      /* distinct items watched now */
    atomic_uint_fast64_t items_pushed; /* items handed to on_changes */
} live_stats_t;

/* Starts the live thread. Returns 0, or -1. */
int live_start(store_t *store, const kinds_t *kinds, const live_options_t *opt, const live_sink_t *sink, live_t **out);

/* Any thread (a short lock): watches items (n ≤ LIVE_IDS_MAX, no repeats) for token and asks for
 * their current counts (on_initial). Returns 0, or -1 when out of memory (nothing watched). */
int live_subscribe(live_t *l, uint64_t token, const span_t *items, size_t n);

/* Any thread: undoes live_subscribe (the same items); a pending on_initial for token is dropped. */
void live_unsubscribe(live_t *l, uint64_t token, const span_t *items, size_t n);

const live_stats_t *live_stats(const live_t *l);

/* Shutdown, first step: stops and joins the thread, so no sink call runs after it returns (nothing
 * more is produced), while live_subscribe and live_unsubscribe stay valid (the streams still end
 * and unsubscribe). Any thread but the live one; idempotent. NULL is fine. */
void live_halt(live_t *l);

/* Halts (when not yet) and frees l: once nothing can unsubscribe any more. */
void live_stop(live_t *l);

#endif
