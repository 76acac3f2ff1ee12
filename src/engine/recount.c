/* recount.c — drift detection and correction, chunk by chunk, one snapshot per chunk. */
#include "engine/recount.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/itemmap.h"

recount_stats_t recount_stats;

static int drift_add(recount_report_t *rep, span_t item, int kind, int64_t counted, int64_t stored)
{
    if (rep->ndrift == rep->cap) {
        size_t cap = rep->cap ? rep->cap * 2 : 16;
        recount_drift_t *d = realloc(rep->drift, cap * sizeof *d);
        if (!d)
            return STORE_ERROR;
        rep->drift = d;
        rep->cap = cap;
    }
    recount_drift_t *d = &rep->drift[rep->ndrift++];
    memcpy(d->item, item.ptr, item.len);
    d->item[item.len] = '\0';
    d->kind = kind;
    d->counted = counted;
    d->stored = stored;
    return STORE_OK;
}

typedef struct {
    store_read_t *snap;
    const itemmap_t *unfolded;
    itemmap_t *fixes;
    recount_report_t *report;
    int kinds;
    int rc;
    char last[ID_MAX_LEN]; /* the last item checked, to continue after it */
    size_t last_len;
} chunk_t;

static int unfolded_add(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    itemmap_entry_t *e = itemmap_get(arg, t->item);
    if (!e)
        return 1;
    reaction_deltas_add(t->from, t->to, e->deltas);
    return 0;
}

/* Compares one item inside the chunk's snapshot. */
static int check_item(void *arg, span_t item)
{
    chunk_t *c = arg;
    int64_t counted[KINDS_MAX + 1], stored[KINDS_MAX + 1];
    memcpy(c->last, item.ptr, item.len);
    c->last_len = item.len;
    if ((c->rc = store_read_tally_item(c->snap, item, counted)) != STORE_OK ||
        (c->rc = store_read_counts(c->snap, item, stored)) != STORE_OK)
        return 1;
    const itemmap_entry_t *pending = itemmap_find(c->unfolded, item);
    c->report->checked++;
    for (int k = 1; k <= c->kinds; k++) {
        int64_t effective = stored[k] + (pending ? pending->deltas[k] : 0);
        if (effective == counted[k])
            continue;
        itemmap_entry_t *fix = itemmap_get(c->fixes, item);
        if (!fix || drift_add(c->report, item, k, counted[k], effective) != STORE_OK) {
            c->rc = STORE_ERROR;
            return 1;
        }
        fix->deltas[k] = counted[k] - effective;
    }
    return 0;
}

/* One chunk: the given items, or up to RECOUNT_CHUNK_ITEMS items after *after when items is NULL.
 * *more says whether the walk over all items goes on. */
static int recount_chunk(store_t *store, const span_t *items, size_t nitems, chunk_t *c, bool *more)
{
    store_read_t *snap;
    itemmap_t unfolded = {0};
    uint64_t checkpoint;
    int rc = store_read_begin(store, &snap);
    if (rc != STORE_OK)
        return rc;
    c->snap = snap;
    c->unfolded = &unfolded;
    c->rc = STORE_OK;
    rc = store_read_checkpoint(snap, &checkpoint);
    if (rc == STORE_OK)
        rc = store_read_log(snap, checkpoint, SIZE_MAX, unfolded_add, &unfolded);
    *more = false;
    if (rc == STORE_OK && items) {
        for (size_t i = 0; i < nitems && c->rc == STORE_OK; i++)
            check_item(c, items[i]);
    } else if (rc == STORE_OK) {
        size_t visited;
        rc = store_read_items(snap, (span_t){c->last, c->last_len}, RECOUNT_CHUNK_ITEMS, check_item, c, &visited);
        *more = visited == RECOUNT_CHUNK_ITEMS;
    }
    if (rc == STORE_OK)
        rc = c->rc;
    store_read_end(snap);
    itemmap_free(&unfolded);
    return rc;
}

/* Queues counts += fix for every item with drift, and waits until they are durable. */
static int corrections_apply(writer_t *writer, const itemmap_t *fixes, recount_report_t *report)
{
    writer_group_t g;
    writer_group_init(&g, true, NULL, NULL);
    int rc = STORE_OK;
    for (size_t i = 0; i < fixes->count && rc == STORE_OK; i++) {
        const itemmap_entry_t *e = &fixes->entries[i];
        write_cmd_t *cmd = calloc(1, sizeof *cmd);
        if (!cmd) {
            rc = STORE_ERROR;
            break;
        }
        cmd->type = WRITE_COUNTS_ADJUST;
        memcpy(cmd->item, e->item, e->item_len);
        cmd->item_len = e->item_len;
        memcpy(cmd->deltas, e->deltas, sizeof cmd->deltas);
        if (writer_group_submit(writer, &g, cmd) != 0) {
            free(cmd);
            rc = STORE_ERROR;
        }
    }
    writer_group_wait(&g, 0);
    if (g.failed)
        rc = STORE_ERROR;
    writer_group_destroy(&g);
    if (rc == STORE_OK)
        report->corrected = report->ndrift;
    return rc;
}

int recount_run(store_t *store, writer_t *writer, const span_t *items, size_t nitems, recount_report_t *report)
{
    *report = (recount_report_t){0};
    itemmap_t fixes = {0};
    chunk_t c = {.fixes = &fixes, .report = report, .kinds = store_kinds(store)->count};
    int rc = STORE_OK;
    bool more = true;
    if (items) {
        for (size_t i = 0; i < nitems && rc == STORE_OK; i += RECOUNT_CHUNK_ITEMS)
            rc = recount_chunk(store, items + i, nitems - i < RECOUNT_CHUNK_ITEMS ? nitems - i : RECOUNT_CHUNK_ITEMS,
                               &c, &more);
    } else {
        while (rc == STORE_OK && more)
            rc = recount_chunk(store, NULL, 0, &c, &more);
    }
    if (rc == STORE_OK && writer && fixes.count)
        rc = corrections_apply(writer, &fixes, report);
    itemmap_free(&fixes);
    if (rc == STORE_OK) {
        atomic_fetch_add(&recount_stats.runs, 1);
        atomic_store(&recount_stats.last_drift, report->ndrift);
        atomic_fetch_add(&recount_stats.corrected_total, report->corrected);
    }
    return rc;
}

void recount_report_free(recount_report_t *report)
{
    free(report->drift);
    *report = (recount_report_t){0};
}
