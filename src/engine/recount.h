/* recount.h — rebuilds counts from the reaction rows and reports (and corrects) drift
 * (docs/architecture.md § Recount). Each chunk of items is compared inside one snapshot: rows against that
 * snapshot's counts plus its not-yet-folded log, an exact comparison that never stops the writer.
 * Corrections go through the writer as commands. In a correct system it finds nothing. */
#ifndef TALLY_ENGINE_RECOUNT_H
#define TALLY_ENGINE_RECOUNT_H

#include <stdatomic.h>

#include "core/ids.h"
#include "core/shardmap.h"
#include "engine/writer.h"
#include "store/store.h"

#define RECOUNT_CHUNK_ITEMS 256

typedef struct {
    char item[ID_MAX_LEN + 1];
    int kind;        /* a kind code, or 0: the reactors */
    int64_t counted; /* rows holding the kind (or any kind) */
    int64_t stored;  /* the counts, plus the log not yet folded into them */
} recount_drift_t;

typedef struct {
    size_t checked;   /* items compared */
    size_t corrected; /* drift entries corrected (0 when run without a writer) */
    /* entries of the lists (who reacted, a user's reactions) that disagree with the rows: should be 0 */
    uint64_t list_mismatches;
    recount_drift_t *drift;
    size_t ndrift, cap;
} recount_report_t;

/* Recounts items (all items when items is NULL). With a writer, queues the corrections and waits
 * until they are durable. Blocks: run it on a thread of its own, never on an HTTP thread.
 * Returns a STORE_ code (STORE_ERROR also when the writer would not take a correction). */
int recount_run(store_t *store, writer_t *writer, const span_t *items, size_t nitems, recount_report_t *report);

/* The node's shards, when there are several (set once, before any recount): a recount of a shard's
 * store then also checks its items' pairs in the users' lists kept on the other shards
 * (userfold_check), and counts what disagrees in list_mismatches. */
struct shards;
void recount_use_shards(struct shards *shards);

void recount_report_free(recount_report_t *report);

/* Every interval_ms, recounts the (at most sample) items written most recently, corrects any
 * drift through the writer and logs it: the drift metric stays current without a full recount.
 * interval_ms 0: off (*out NULL). */
typedef struct recount_sampler recount_sampler_t;
int recount_sampler_start(store_t *store, writer_t *writer, uint64_t interval_ms, size_t sample,
                          recount_sampler_t **out);
void recount_sampler_stop(recount_sampler_t *r);

/* For the metrics: recounts finished and the corrections they made; per shard, the drift entries and
 * the lists' entries that disagreed with the rows, found by that shard's last finished recount. */
typedef struct {
    atomic_uint_fast64_t runs, corrected_total;
    atomic_uint_fast64_t last_drift[SHARD_MAX];
    atomic_uint_fast64_t last_list_mismatches[SHARD_MAX];
} recount_stats_t;
extern recount_stats_t recount_stats;

/* Summed over the shards: what each one's last finished recount found (a shard's clean run does not
 * hide another's drift). */
uint64_t recount_last_drift(void);
uint64_t recount_last_list_mismatches(void);

#endif
