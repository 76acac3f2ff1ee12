/* recount.c — drift detection and correction, chunk by chunk, one snapshot per chunk. */
#include "engine/recount.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/itemmap.h"
#include "core/listchange.h"
#include "core/log.h"
#include "engine/thread.h"
#include "engine/userfold.h"

recount_stats_t recount_stats;

static shards_t *recount_shards; /* several: the users' lists on the other shards are checked too */

void recount_use_shards(shards_t *shards)
{
    recount_shards = shards;
}

/* store's shard in recount_shards, or -1 (one shard, or a store of no shard: a tool's) */
static long shard_of_store(const store_t *store)
{
    for (size_t k = 0; recount_shards && k < shards_count(recount_shards); k++)
        if (shards_store(recount_shards, k) == store)
            return (long)k;
    return -1;
}

/* One recount at a time: two running together could both correct the same drift. */
static pthread_mutex_t recount_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* A chunk's item, copied out of the walk's call (the store's memory is the walk's only during it). */
typedef struct {
    char id[ID_MAX_LEN];
    size_t len;
} chunk_item_t;

typedef struct {
    store_read_t *snap;
    const itemmap_t *unfolded;
    const listmap_t *unfolded_pairs;
    itemmap_t *fixes;
    itemmap_t *checked; /* the chunk's items, for the check of the users' lists on other shards */
    recount_report_t *report;
    int kinds;
    bool many;
    chunk_item_t *walked; /* RECOUNT_CHUNK_ITEMS: the items of a walk's chunk */
    size_t nwalked;
} chunk_t;

/* The log not yet folded, summed per item. A scan stopped by a failed itemmap_get would leave a
 * partial map and every later comparison would find false drift: it is an error, as in fold_one. */
typedef struct {
    itemmap_t map;
    /* per pair the log changed after the checkpoint, its set as folded: the first such entry's
     * `from` (change.set; change.seq marks it taken) */
    listmap_t pairs;
    int rc;
} unfolded_t;

static int unfolded_add(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    unfolded_t *u = arg;
    itemmap_entry_t *e = itemmap_get(&u->map, t->item);
    if (!e) {
        u->rc = STORE_ERROR;
        return 1;
    }
    transition_deltas_add(t, e->deltas);
    if (t->from == t->to)
        return 0; /* a void or a restore leaves the lists as they are */
    listmap_entry_t *p = listmap_get(&u->pairs, t->item, t->user);
    if (!p) {
        u->rc = STORE_ERROR;
        return 1;
    }
    if (p->change.seq == 0) { /* positions start at 1 */
        p->change.set = t->from;
        p->change.seq = seq;
    }
    return 0;
}

/* The set the lists should hold for (item, user): the row's, or its set before the unfolded log. */
static kindset_t expect_folded(void *arg, span_t item, span_t user, kindset_t row_set)
{
    const listmap_entry_t *p = listmap_find(arg, item, user);
    return p ? p->change.set : row_set;
}

/* Compares the chunk's items inside its snapshot: the rows' counts against the stored counts and the
 * log not yet folded, and the lists against the rows, a few statements for the lot. */
static int check_items(chunk_t *c, const span_t *items, size_t n)
{
    int64_t(*counted)[KINDS_MAX + 1] = calloc(n ? n : 1, sizeof *counted);
    int64_t(*stored)[KINDS_MAX + 1] = calloc(n ? n : 1, sizeof *stored);
    int rc = counted && stored ? STORE_OK : STORE_ERROR;
    if (rc == STORE_OK)
        rc = store_read_tally_items(c->snap, items, n, counted);
    if (rc == STORE_OK)
        rc = store_read_many(c->snap, items, n, (span_t){"", 0}, stored, NULL);
    for (size_t i = 0; i < n && rc == STORE_OK; i++) {
        const itemmap_entry_t *pending = itemmap_find(c->unfolded, items[i]);
        c->report->checked++;
        if (c->checked && !itemmap_get(c->checked, items[i])) {
            rc = STORE_ERROR;
            break;
        }
        /* [0], the reactors, is kept in many mode; in one mode it is the sum of the others */
        for (int k = c->many ? KIND_NONE : 1; k <= c->kinds && rc == STORE_OK; k++) {
            int64_t effective = stored[i][k] + (pending ? pending->deltas[k] : 0);
            if (effective == counted[i][k])
                continue;
            itemmap_entry_t *fix = itemmap_get(c->fixes, items[i]);
            if (!fix || drift_add(c->report, items[i], k, counted[i][k], effective) != STORE_OK)
                rc = STORE_ERROR;
            else
                fix->deltas[k] = counted[i][k] - effective;
        }
    }
    free(counted);
    free(stored);
    uint64_t mismatches = 0;
    if (rc == STORE_OK && n &&
        (rc = store_read_lists_check(c->snap, items, n, expect_folded, (void *)c->unfolded_pairs, &mismatches)) ==
            STORE_OK)
        c->report->list_mismatches += mismatches;
    return rc;
}

static int walk_one(void *arg, span_t item)
{
    chunk_t *c = arg;
    chunk_item_t *w = &c->walked[c->nwalked++];
    memcpy(w->id, item.ptr, item.len);
    w->len = item.len;
    return 0;
}

/* One chunk: the given items, or up to RECOUNT_CHUNK_ITEMS items after *after when items is NULL.
 * *more says whether the walk over all items goes on. */
static int recount_chunk(store_t *store, const span_t *items, size_t nitems, chunk_t *c, bool *more)
{
    store_read_t *snap;
    unfolded_t unfolded = {.rc = STORE_OK};
    uint64_t checkpoint;
    int rc = store_read_begin(store, &snap);
    if (rc != STORE_OK)
        return rc;
    c->snap = snap;
    c->unfolded = &unfolded.map;
    c->unfolded_pairs = &unfolded.pairs;
    rc = store_read_checkpoint(snap, &checkpoint);
    if (rc == STORE_OK)
        rc = store_read_log(snap, checkpoint, SIZE_MAX, unfolded_add, &unfolded);
    if (rc == STORE_OK && unfolded.rc != STORE_OK) {
        log_line("level=error event=recount-failed error=\"the log after the checkpoint could not be summed "
                 "(out of memory, or an item id longer than %d bytes)\"",
                 ID_MAX_LEN);
        rc = unfolded.rc;
    }
    *more = false;
    if (rc == STORE_OK && items) {
        rc = check_items(c, items, nitems);
    } else if (rc == STORE_OK) {
        size_t visited;
        chunk_item_t last = c->nwalked ? c->walked[c->nwalked - 1] : (chunk_item_t){0}; /* to go on after it */
        c->nwalked = 0;
        rc = store_read_items(snap, (span_t){last.id, last.len}, RECOUNT_CHUNK_ITEMS, walk_one, c, &visited);
        span_t walked[RECOUNT_CHUNK_ITEMS];
        for (size_t i = 0; i < c->nwalked; i++)
            walked[i] = (span_t){c->walked[i].id, c->walked[i].len};
        if (rc == STORE_OK)
            rc = check_items(c, walked, c->nwalked);
        *more = visited == RECOUNT_CHUNK_ITEMS;
        uint64_t twins = 0; /* after the last chunk: the user index against the item index */
        if (rc == STORE_OK && !*more && (rc = store_read_lists_check(snap, NULL, 0, NULL, NULL, &twins)) == STORE_OK)
            c->report->list_mismatches += twins;
    }
    store_read_end(snap);
    itemmap_free(&unfolded.map);
    listmap_free(&unfolded.pairs);
    long k = shard_of_store(store);
    if (rc == STORE_OK && k >= 0 && c->checked->count) {
        uint64_t copies = 0;
        rc = userfold_check(recount_shards, (size_t)k, c->checked, &copies);
        c->report->list_mismatches += copies;
    }
    if (c->checked)
        itemmap_clear(c->checked);
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
        memcpy(cmd->counts_adjust.item, e->item, e->item_len);
        cmd->counts_adjust.item_len = e->item_len;
        memcpy(cmd->counts_adjust.deltas, e->deltas, sizeof cmd->counts_adjust.deltas);
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

static int recount_locked(store_t *store, writer_t *writer, const span_t *items, size_t nitems,
                          recount_report_t *report);

int recount_run(store_t *store, writer_t *writer, const span_t *items, size_t nitems, recount_report_t *report)
{
    pthread_mutex_lock(&recount_lock);
    int rc = recount_locked(store, writer, items, nitems, report);
    pthread_mutex_unlock(&recount_lock);
    return rc;
}

static int recount_locked(store_t *store, writer_t *writer, const span_t *items, size_t nitems,
                          recount_report_t *report)
{
    *report = (recount_report_t){0};
    itemmap_t fixes = {0}, checked = {0};
    chunk_t c = {.fixes = &fixes,
                 .checked = shard_of_store(store) >= 0 ? &checked : NULL,
                 .report = report,
                 .kinds = store_kinds(store)->count,
                 .many = store_kinds(store)->mode == REACTION_MODE_MANY};
    int rc = STORE_OK;
    bool more = true;
    if (items) {
        for (size_t i = 0; i < nitems && rc == STORE_OK; i += RECOUNT_CHUNK_ITEMS)
            rc = recount_chunk(store, items + i, nitems - i < RECOUNT_CHUNK_ITEMS ? nitems - i : RECOUNT_CHUNK_ITEMS,
                               &c, &more);
    } else {
        c.walked = calloc(RECOUNT_CHUNK_ITEMS, sizeof *c.walked);
        rc = c.walked ? STORE_OK : STORE_ERROR;
        while (rc == STORE_OK && more)
            rc = recount_chunk(store, NULL, 0, &c, &more);
    }
    if (rc == STORE_OK && writer && fixes.count)
        rc = corrections_apply(writer, &fixes, report);
    free(c.walked);
    itemmap_free(&fixes);
    itemmap_free(&checked);
    if (rc == STORE_OK) {
        atomic_fetch_add(&recount_stats.runs, 1);
        long k = shard_of_store(store);
        size_t at = k > 0 ? (size_t)k : 0;
        atomic_store(&recount_stats.last_drift[at], report->ndrift);
        atomic_store(&recount_stats.last_list_mismatches[at], report->list_mismatches);
        atomic_fetch_add(&recount_stats.corrected_total, report->corrected);
    }
    return rc;
}

uint64_t recount_last_drift(void)
{
    uint64_t n = 0;
    for (size_t k = 0; k < SHARD_MAX; k++)
        n += atomic_load_explicit(&recount_stats.last_drift[k], memory_order_relaxed);
    return n;
}

uint64_t recount_last_list_mismatches(void)
{
    uint64_t n = 0;
    for (size_t k = 0; k < SHARD_MAX; k++)
        n += atomic_load_explicit(&recount_stats.last_list_mismatches[k], memory_order_relaxed);
    return n;
}

void recount_report_free(recount_report_t *report)
{
    free(report->drift);
    *report = (recount_report_t){0};
}

/* --- the periodic recount of recently written items --- */

#define SAMPLE_LOG_ENTRIES 10000

struct recount_sampler {
    store_t *store;
    writer_t *writer;
    uint64_t interval_ms;
    size_t sample;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stopping;
};

typedef struct {
    itemmap_t items;
    size_t max;
} sample_t;

static int sample_add(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    sample_t *s = arg;
    if (s->items.count < s->max)
        itemmap_get(&s->items, t->item);
    return 0;
}

/* The distinct items of the newest log entries, at most sample of them. */
static int sample_recent(recount_sampler_t *r, sample_t *s)
{
    store_read_t *snap;
    uint64_t first, last;
    int rc = store_read_begin(r->store, &snap);
    if (rc != STORE_OK)
        return rc;
    rc = store_read_log_bounds(snap, &first, &last);
    if (rc == STORE_OK && last) {
        uint64_t from = last > SAMPLE_LOG_ENTRIES ? last - SAMPLE_LOG_ENTRIES : 0;
        rc = store_read_log(snap, from < first ? first - 1 : from, SAMPLE_LOG_ENTRIES, sample_add, s);
    }
    store_read_end(snap);
    return rc;
}

static void sampler_pass(recount_sampler_t *r)
{
    sample_t s = {.max = r->sample};
    span_t *items = NULL;
    if (sample_recent(r, &s) == STORE_OK && s.items.count && (items = calloc(s.items.count, sizeof *items))) {
        for (size_t i = 0; i < s.items.count; i++)
            items[i] = (span_t){s.items.entries[i].item, s.items.entries[i].item_len};
        recount_report_t rep;
        if (recount_run(r->store, r->writer, items, s.items.count, &rep) == STORE_OK && rep.ndrift) {
            for (size_t i = 0; i < rep.ndrift; i++)
                log_line("level=error event=drift item=%s kind=%d counted=%lld stored=%lld corrected=%s",
                         rep.drift[i].item, rep.drift[i].kind, (long long)rep.drift[i].counted,
                         (long long)rep.drift[i].stored, rep.corrected ? "yes" : "no");
        }
        recount_report_free(&rep);
    }
    free(items);
    itemmap_free(&s.items);
}

static void *sampler_main(void *arg)
{
    recount_sampler_t *r = arg;
    thread_set_name("tally-recount");
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        struct timespec until = clock_deadline(CLOCK_MONOTONIC, r->interval_ms);
        if (pthread_cond_timedwait(&r->wake, &r->lock, &until) == 0 || r->stopping)
            continue;
        pthread_mutex_unlock(&r->lock);
        sampler_pass(r);
        pthread_mutex_lock(&r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int recount_sampler_start(store_t *store, writer_t *writer, uint64_t interval_ms, size_t sample,
                          recount_sampler_t **out)
{
    *out = NULL;
    if (interval_ms == 0)
        return 0;
    recount_sampler_t *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    *r = (recount_sampler_t){.store = store, .writer = writer, .interval_ms = interval_ms, .sample = sample};
    pthread_mutex_init(&r->lock, NULL);
    clock_cond_init_monotonic(&r->wake);
    if (pthread_create(&r->thread, NULL, sampler_main, r) != 0) {
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void recount_sampler_stop(recount_sampler_t *r)
{
    if (!r)
        return;
    thread_stop_join(&r->lock, &r->wake, &r->stopping, r->thread);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
