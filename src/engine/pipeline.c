/* pipeline.c — the fold: many transitions of one item become one counts update. */
#include "engine/pipeline.h"

#include <assert.h>
#include <stdlib.h>

#include "core/ids.h"

#define FOLD_TABLE_MIN 64

typedef struct {
    char item[ID_MAX_LEN];
    size_t item_len;
    int64_t deltas[KINDS_MAX + 1];
} fold_entry_t;

/* Open-addressing index over a growing array of entries, one per distinct item. */
typedef struct {
    fold_entry_t *entries;
    size_t count, cap;
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t nslots;   /* power of two, at least twice cap */
    uint64_t last_seq;
    size_t limit, seen;
    pipeline_result_t *result;
    int rc;
} fold_t;

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static int fold_grow(fold_t *f)
{
    size_t cap = f->cap ? f->cap * 2 : FOLD_TABLE_MIN;
    fold_entry_t *entries = realloc(f->entries, cap * sizeof *entries);
    if (!entries)
        return -1;
    f->entries = entries;
    f->cap = cap;
    size_t nslots = cap * 2;
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < f->count; i++) {
        size_t s = hash_bytes(entries[i].item, entries[i].item_len) & (nslots - 1);
        while (slots[s])
            s = (s + 1) & (nslots - 1);
        slots[s] = (uint32_t)(i + 1);
    }
    free(f->slots);
    f->slots = slots;
    f->nslots = nslots;
    return 0;
}

static fold_entry_t *fold_entry(fold_t *f, span_t item)
{
    if (f->count == f->cap && fold_grow(f) != 0)
        return NULL;
    size_t s = hash_bytes(item.ptr, item.len) & (f->nslots - 1);
    for (; f->slots[s]; s = (s + 1) & (f->nslots - 1)) {
        fold_entry_t *e = &f->entries[f->slots[s] - 1];
        if (e->item_len == item.len && memcmp(e->item, item.ptr, item.len) == 0)
            return e;
    }
    fold_entry_t *e = &f->entries[f->count];
    memcpy(e->item, item.ptr, item.len);
    e->item_len = item.len;
    memset(e->deltas, 0, sizeof e->deltas);
    f->slots[s] = (uint32_t)(++f->count);
    return e;
}

static int fold_one(void *arg, uint64_t seq, const transition_t *t)
{
    fold_t *f = arg;
    if (f->seen == f->limit) { /* one past the limit: only look, to report the lag */
        f->result->more = true;
        f->result->oldest_unfolded_ms = t->at_ms;
        return 1;
    }
    assert(t->item.len <= ID_MAX_LEN);
    fold_entry_t *e = fold_entry(f, t->item);
    if (!e) {
        f->rc = STORE_ERROR;
        return 1;
    }
    reaction_deltas_add(t->from, t->to, e->deltas);
    f->last_seq = seq;
    f->seen++;
    return 0;
}

int pipeline_fold(store_write_t *w, size_t limit, pipeline_result_t *result)
{
    fold_t f = {.limit = limit, .result = result, .rc = STORE_OK};
    *result = (pipeline_result_t){0};
    uint64_t checkpoint;
    int rc = store_checkpoint_get(w, &checkpoint);
    if (rc == STORE_OK)
        rc = store_log_scan(w, checkpoint, limit + 1, fold_one, &f);
    if (rc == STORE_OK)
        rc = f.rc;
    size_t updates = 0;
    for (size_t i = 0; rc == STORE_OK && i < f.count; i++) {
        const fold_entry_t *e = &f.entries[i];
        bool net_zero = true; /* a like taken back within the batch writes nothing */
        for (int k = 1; k <= KINDS_MAX; k++)
            net_zero = net_zero && e->deltas[k] == 0;
        if (!net_zero) {
            rc = store_counts_add(w, (span_t){e->item, e->item_len}, e->deltas);
            updates++;
        }
    }
    if (rc == STORE_OK && f.seen > 0)
        rc = store_checkpoint_put(w, f.last_seq);
    if (rc == STORE_OK) {
        result->folded = f.seen;
        result->items = updates;
    }
    free(f.entries);
    free(f.slots);
    return rc;
}
