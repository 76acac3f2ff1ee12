/* webhooks.h — webhook delivery: a thread of its own follows every shard's log from snapshots and
 * POSTs batches of up to 100 change-feed entries, each shard's in its commit order (merged as a page
 * of the feed is, core/feedmerge.h), to each webhook (libcurl multi, one
 * easy handle per webhook), signed, at least once, with backoff; the delivered position and the
 * pending batch are kept in the store (webhook_store.h) through the writer, so a restart or a crash
 * never skips a transition and a retried batch is the same batch with the same delivery id. It
 * never blocks the writer or an HTTP thread: it waits on the writer for its own records only. On a
 * shared store only the node that folds the log (the fold leader) delivers. */
#ifndef TALLY_ENGINE_WEBHOOKS_H
#define TALLY_ENGINE_WEBHOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "core/kinds.h"
#include "core/netallow.h"
#include "engine/webhook_store.h"
#include "engine/writer.h"
#include "store/store.h"

#define WEBHOOKS_BATCH_MAX 100 /* docs/api.md: up to 100 transitions per delivery */

typedef struct webhooks webhooks_t;

typedef struct {
    uint64_t timeout_ms;        /* a 2xx within this counts as delivered (--webhook-timeout) */
    uint64_t backoff_min_ms;    /* first retry after a failure (--webhook-backoff-min) */
    uint64_t backoff_max_ms;    /* retries at most this far apart (--webhook-backoff-max) */
    uint64_t secret_overlap_ms; /* after a rotation the old secret signs too this long */
    netallow_t allow;           /* destinations allowed besides the public ranges (--webhook-allow) */
    const char *mode;           /* the body's "mode" member: the reaction mode in force ("one") */
} webhooks_options_t;

/* Starts the delivery thread (and libcurl) over every shard's store (stores[0..count), in shard
 * order: each one's log is followed; the records are shard 0's, written through writer, shard 0's).
 * Returns 0, or -1. */
int webhooks_start(store_t *const *stores, size_t count, writer_t *writer, const kinds_t *kinds,
                   const webhooks_options_t *opt, webhooks_t **out);

/* New transitions were committed (any thread; cheap, called after every commit). */
void webhooks_notify(webhooks_t *wh);

/* Stops the thread (transfers in flight are abandoned: their batch stays pending in the store and
 * is sent again by whoever delivers next) and frees everything. NULL is fine. */
void webhooks_stop(webhooks_t *wh);

const webhooks_options_t *webhooks_options(const webhooks_t *wh);

/* The timings SIGHUP may change (the four durations above), for the next deliveries; any thread.
 * Readers of them load them atomically (__atomic_load_n). */
void webhooks_set_timings(webhooks_t *wh, uint64_t timeout_ms, uint64_t backoff_min_ms, uint64_t backoff_max_ms,
                          uint64_t secret_overlap_ms);

/* Whether url may be a webhook's: http:// or https://, at most 2048 bytes, parsed by libcurl, and
 * when its host is an IP address, one the allow rule permits. Returns 0, or -1 with why filled. */
int webhooks_check_url(const webhooks_t *wh, const char *url, size_t len, char *why, size_t whylen);

/* Per webhook, for the metrics (this node's counters). */
typedef struct {
    char id[WHSTORE_ID_MAX + 1];
    double oldest_undelivered_s; /* age of the oldest transition not yet delivered; 0 when none */
    uint64_t deliveries, failures;
    bool expired;
} webhooks_stat_t;

/* Fills out[0..max) with the webhooks this node knows; returns how many. Any thread. */
size_t webhooks_stats(webhooks_t *wh, webhooks_stat_t *out, size_t max);

/* The age in ms of the oldest entry after position delivered in the snapshot (0 when none). */
int webhooks_lag_ms(store_read_t *r, uint64_t delivered, uint64_t now_ms, uint64_t *lag_ms);

/* The category of an attempt's failure (never the receiver's text), NULL when it was delivered:
 * refused is true when the allow list turned down an address the name resolved to (curl then tries
 * the next one, so it is the cause only when the transfer failed); curl_rc a CURLcode. Pure. */
const char *webhooks_failure_category(bool refused, int curl_rc, long status);

#endif
