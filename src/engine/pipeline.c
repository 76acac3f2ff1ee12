/* pipeline.c — the fold: many transitions of one item become one counts update, and many
 * transitions of one (item, user) pair one change of the lists (who reacted, a user's reactions),
 * written in the same transaction as the counts and the checkpoint. */
#include "engine/pipeline.h"

#include <assert.h>
#include <stdio.h>

#include "core/itemmap.h"
#include "core/listchange.h"
#include "core/log.h"

typedef struct {
    itemmap_t sums;
    listmap_t pairs;
    uint64_t last_seq;
    size_t limit, seen;
    pipeline_result_t *result;
    int rc;
} fold_t;

static int fold_one(void *arg, uint64_t seq, const transition_t *t)
{
    fold_t *f = arg;
    if (f->seen == f->limit) { /* one past the limit: only look, to report the lag */
        f->result->more = true;
        f->result->oldest_unfolded_ms = t->at_ms;
        return 1;
    }
    if (!transition_well_formed(t)) { /* read from the disk: the writer logs only changes, voids, restores */
        log_line("level=error event=store-corrupt table=log seq=%llu error=\"an entry that changes nothing\"",
                 (unsigned long long)seq);
        f->rc = STORE_ERROR;
        return 1;
    }
    itemmap_entry_t *e = itemmap_get(&f->sums, t->item);
    if (!e) {
        f->rc = STORE_ERROR;
        return 1;
    }
    transition_deltas_add(t, e->deltas);
    f->last_seq = seq;
    f->seen++;
    if (t->from == t->to)
        return 0; /* a void or a restore: the lists keep the user's reactions where they were */
    listmap_entry_t *p = listmap_get(&f->pairs, t->item, t->user);
    if (!p) {
        f->rc = STORE_ERROR;
        return 1;
    }
    list_change_add(&p->change, t->from, t->to, seq, t->at_ms);
    return 0;
}

int pipeline_fold(store_write_t *w, size_t limit, pipeline_result_t *result)
{
    fold_t f = {.limit = limit, .result = result, .rc = STORE_OK};
    *result = (pipeline_result_t){0};
    uint64_t checkpoint;
    int rc = store_checkpoint_get(w, &checkpoint);
    if (rc == STORE_OK)
        rc = store_log_scan(w, checkpoint, pipeline_fold_scan(limit), fold_one, &f);
    if (rc == STORE_OK)
        rc = f.rc;
    size_t updates = 0;
    for (size_t i = 0; rc == STORE_OK && i < f.sums.count; i++) {
        const itemmap_entry_t *e = &f.sums.entries[i];
        if (itemmap_entry_is_zero(e))
            continue; /* a like taken back within the batch writes nothing */
        /* Each folded transition moves each of an item's counts (and its reactors, [0]) by -1, 0 or
         * +1. A count driven below zero is the disk's data disagreeing, an error of store_counts_add. */
        for (int k = 0; k <= KINDS_MAX; k++)
            assert(e->deltas[k] >= -(int64_t)f.seen && e->deltas[k] <= (int64_t)f.seen);
        rc = store_counts_add(w, (span_t){e->item, e->item_len}, e->deltas);
        updates++;
    }
    for (size_t i = 0; rc == STORE_OK && i < f.pairs.count; i++) {
        const listmap_entry_t *p = &f.pairs.entries[i];
        rc = store_list_apply(w, (span_t){p->item, p->item_len}, (span_t){p->user, p->user_len}, &p->change);
    }
    if (rc == STORE_OK && f.seen > 0)
        rc = store_checkpoint_put(w, f.last_seq);
    if (rc == STORE_OK) {
        result->folded = f.seen;
        result->items = updates;
    }
    itemmap_free(&f.sums);
    listmap_free(&f.pairs);
    return rc;
}
