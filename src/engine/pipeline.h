/* pipeline.h — folds the transition log into the counts (docs/architecture.md § The pipeline).
 * Called by the writer thread inside its write transaction, so that the counts and the checkpoint
 * commit together with whatever else the transaction holds: a replay never counts twice. */
#ifndef TALLY_ENGINE_PIPELINE_H
#define TALLY_ENGINE_PIPELINE_H

#include <stdint.h>

#include "store/store.h"

typedef struct {
    size_t folded;               /* log entries folded by this call */
    size_t items;                /* counts updates written (items whose net change is not zero) */
    bool more;                   /* entries remain after this call's limit */
    uint64_t oldest_unfolded_ms; /* commit time of the first entry left unfolded (when more) */
} pipeline_result_t;

/* Folds up to limit entries after the checkpoint: sums each item's deltas in memory, writes one
 * counts update per item and one lists change per (item, user) pair, and moves the checkpoint. Returns a STORE_ code;
 * on error the caller must abort the transaction. Writer thread only. */
int pipeline_fold(store_write_t *w, size_t limit, pipeline_result_t *result);

/* How many log entries pipeline_fold(limit) asks store_log_scan for (after the checkpoint): one more
 * than it folds, to learn whether more wait. For store_write_prepare's fold_scan. */
static inline size_t pipeline_fold_scan(size_t limit)
{
    return limit + 1;
}

#endif
