/* trending.h — trending items and hot items from the transition log, in memory bounded by
 * configuration (docs/architecture.md § Trending and hot items: the log is also its input).
 *
 * A thread follows the log (woken on each commit) and feeds Space-Saving summaries per time
 * bucket and per kind: gains (transitions to the kind) and losses (transitions from it). Windows
 * are sums over buckets: 1m over 5 s buckets, 1h over 1 min buckets, 24h over 1 h buckets.
 * Closed buckets are persisted once, the open ones with the log cursor every minute, so a restart
 * reads at most about a minute of log.
 *
 * Across shards: one follower per shard, each with its own summaries of its shard's log, persisted as
 * that shard's auxiliary records through that shard's writer (the cursor they end at is a position
 * of that log), merged when read. An item lives on one shard, so the shards' summaries count disjoint
 * items: the top of the union is the merge of each shard's top, and an item's error is within its own
 * shard's bound. Kept cluster-wide on shard 0 instead, one follower would need a cursor per shard
 * beside the summaries, and a shard that is down would stall the whole: per shard, a shard down
 * stops only its own items' gains, and restores from its own records when it is back. Several nodes
 * agree as with one shard: each follows every shard's log, which is the same for all. One shard is
 * one follower, exactly as before. */
#ifndef TALLY_ENGINE_TRENDING_H
#define TALLY_ENGINE_TRENDING_H

#include "core/ids.h"
#include "core/kinds.h"
#include "engine/writer.h"
#include "store/store.h"

typedef enum { WINDOW_1M, WINDOW_1H, WINDOW_24H, WINDOW_COUNT } trend_window_t;

#define TRENDING_CAPACITY_DEFAULT 512
#define TRENDING_LIMIT_MAX 100

typedef struct {
    size_t capacity;      /* counters per summary (K) */
    double hot_threshold; /* writes per second that make an item hot */
} trending_options_t;

typedef struct {
    char item[ID_MAX_LEN + 1];
    int64_t gain; /* net: gains minus losses in the window */
    double rate;  /* hot items: transitions per second */
} trend_entry_t;

typedef struct trending trending_t;

/* For each of the n shards (stores[k], writers[k]): restores its persisted summaries, replays its log
 * after them, and starts following it. Returns 0, or -1 (start-up: the process exits). */
int trending_start_shards(store_t *const *stores, writer_t *const *writers, size_t n, const kinds_t *kinds,
                          const trending_options_t *opt, trending_t **out);
/* One store (a cluster of one shard). */
int trending_start(store_t *store, writer_t *writer, const kinds_t *kinds, const trending_options_t *opt,
                   trending_t **out);
void trending_notify(void *t);                       /* any thread: new transitions committed (every shard) */
void trending_notify_shard(trending_t *t, size_t k); /* any thread: new transitions committed on shard k */
/* Stops every follower, each persisting its open buckets through its writer (which must still run). */
void trending_stop(trending_t *t);

/* The items with the largest net gain of kind in window, largest first, at most limit (≤ 100);
 * only positive gains. Returns the number written to out. Any thread. */
size_t trending_top(trending_t *t, int kind, trend_window_t window, size_t limit, trend_entry_t *out);

/* Items written more often than the threshold over the last closed 10 s, fastest first. */
size_t trending_hot(trending_t *t, size_t limit, trend_entry_t *out);

/* For tests and the docs: the error bound of a window now: (gains + losses in it) / capacity, the
 * largest of the shards' (each item is counted on its own shard). */
double trending_error_bound(trending_t *t, int kind, trend_window_t window);

/* Failed store reads (restoring, following the log) and failed persists so far, each also logged
 * as event=trending-…-failed (for the metrics). Any thread. */
uint64_t trending_errors(const trending_t *t);

/* How far the followers are behind their logs, in entries, summed over the shards (the metrics). */
uint64_t trending_behind(trending_t *t);

#endif
