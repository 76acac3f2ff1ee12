/* live.c — the live thread: passes over the log up to the checkpoint, initial counts for new
 * subscriptions, keep-alive ticks. Subscriptions (item → how many watch it, and the queue of
 * initial reads) are under one mutex that no store read is made under. */
#include "engine/live.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/itemmap.h"
#include "core/log.h"
#include "core/strmap.h"
#include "engine/thread.h"

#define SCAN_CHUNK 10000        /* log entries per read */
#define SCAN_PASS_MAX 65536     /* log entries per pass at most; a backlog is read over the next passes */
#define READ_CHUNK LIVE_IDS_MAX /* counts per store_read_many */

/* A subscription waiting for its initial counts. */
typedef struct live_request {
    uint64_t token;
    size_t n;
    char ids[LIVE_IDS_MAX][ID_MAX_LEN];
    size_t lens[LIVE_IDS_MAX];
    struct live_request *next;
} live_request_t;

struct live {
    store_t *store;
    const kinds_t *kinds;
    live_options_t opt;
    live_sink_t sink;
    pthread_t thread;
    bool halted;          /* the thread is joined (live_halt's caller's) */
    pthread_mutex_t lock; /* guards what follows, up to the live thread's own state */
    pthread_cond_t wake;
    bool stopping;
    strmap_t watched; /* item → subscriptions watching it */
    live_request_t *pending, *pending_tail;
    /* the live thread's own */
    bool following;       /* pos is known */
    uint64_t pos;         /* the last log entry looked at */
    bool failing;         /* the last read failed (logged once per outage) */
    bool resync;          /* the log was pruned past pos: every watched item is taken as changed */
    uint64_t render_seen; /* opt.render_epoch as the last full pass saw it */
    itemmap_t changed;
    uint64_t scan_upto, scan_last; /* scan_log's bounds and progress */
    size_t scan_seen;
    int64_t (*counts)[KINDS_MAX + 1]; /* READ_CHUNK */
    reaction_row_t *rows;             /* READ_CHUNK (unused: no viewer) */
    live_item_t *out;                 /* READ_CHUNK */
    live_stats_t stats;
};

const live_stats_t *live_stats(const live_t *l)
{
    return &l->stats;
}

/* --- subscriptions (any thread) --- */

int live_subscribe(live_t *l, uint64_t token, const span_t *items, size_t n)
{
    live_request_t *req = calloc(1, sizeof *req);
    if (!req || n > LIVE_IDS_MAX) {
        free(req);
        return -1;
    }
    req->token = token;
    for (size_t i = 0; i < n; i++) {
        memcpy(req->ids[i], items[i].ptr, items[i].len);
        req->lens[i] = items[i].len;
    }
    req->n = n;
    pthread_mutex_lock(&l->lock);
    size_t done = 0;
    for (; done < n; done++) {
        uint64_t *v = strmap_get(&l->watched, items[done]);
        if (!v)
            break;
        ++*v;
    }
    if (done < n) { /* out of memory: undo */
        for (size_t i = 0; i < done; i++) {
            uint64_t *v = strmap_find(&l->watched, items[i]);
            if (v && --*v == 0)
                strmap_delete(&l->watched, items[i]);
        }
        pthread_mutex_unlock(&l->lock);
        free(req);
        return -1;
    }
    if (l->pending_tail)
        l->pending_tail->next = req;
    else
        l->pending = req;
    l->pending_tail = req;
    atomic_store_explicit(&l->stats.watched, l->watched.count, memory_order_relaxed);
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->lock);
    return 0;
}

void live_unsubscribe(live_t *l, uint64_t token, const span_t *items, size_t n)
{
    pthread_mutex_lock(&l->lock);
    for (size_t i = 0; i < n; i++) {
        uint64_t *v = strmap_find(&l->watched, items[i]);
        if (v && --*v == 0)
            strmap_delete(&l->watched, items[i]);
    }
    live_request_t **link = &l->pending, *prev = NULL;
    while (*link && (*link)->token != token) {
        prev = *link;
        link = &(*link)->next;
    }
    if (*link) {
        live_request_t *gone = *link;
        *link = gone->next;
        if (l->pending_tail == gone)
            l->pending_tail = prev;
        free(gone);
    }
    atomic_store_explicit(&l->stats.watched, l->watched.count, memory_order_relaxed);
    pthread_mutex_unlock(&l->lock);
}

/* --- one pass (live thread) --- */

static int note_changed(void *arg, uint64_t seq, const transition_t *t)
{
    live_t *l = arg;
    if (seq > l->scan_upto)
        return 1; /* past the checkpoint: not folded yet */
    l->scan_last = seq;
    l->scan_seen++;
    itemmap_entry_t *e = itemmap_get(&l->changed, t->item);
    if (!e)
        l->resync = true; /* out of memory: take everything as changed */
    else
        e->deltas[KIND_NONE] = (int64_t)seq; /* unused slot (none is not counted): the last change */
    return 0;
}

/* Reads the counts of items[0..n) from snap, READ_CHUNK at a time, and hands each chunk to emit. */
typedef void (*emit_fn)(live_t *l, uint64_t cursor, const live_item_t *items, size_t n, void *arg);

static int read_and_emit(live_t *l, store_read_t *snap, uint64_t cursor, const span_t *items,
                         const uint64_t *changed_at, size_t n, emit_fn emit, void *arg)
{
    for (size_t at = 0; at < n; at += READ_CHUNK) {
        size_t k = n - at < READ_CHUNK ? n - at : READ_CHUNK;
        int rc = store_read_many(snap, items + at, k, (span_t){"", 0}, l->counts, l->rows);
        if (rc != STORE_OK)
            return rc;
        for (size_t i = 0; i < k; i++)
            l->out[i] = (live_item_t){items[at + i], l->counts[i], changed_at ? changed_at[at + i] : 0};
        emit(l, cursor, l->out, k, arg);
    }
    return STORE_OK;
}

static void emit_changes(live_t *l, uint64_t cursor, const live_item_t *items, size_t n, void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&l->stats.items_pushed, n, memory_order_relaxed);
    l->sink.on_changes(l->sink.arg, cursor, items, n);
}

/* The log entries after pos up to checkpoint (at most SCAN_PASS_MAX) into l->changed; pos moves
 * to the last one read. */
static int scan_log(live_t *l, store_read_t *snap, uint64_t checkpoint)
{
    uint64_t first = 0, last = 0;
    int rc = store_read_log_bounds(snap, &first, &last);
    if (rc != STORE_OK)
        return rc;
    if (first > l->pos + 1) { /* pruned past us (a long outage): everything may have changed */
        l->resync = true;
        l->pos = checkpoint;
        return STORE_OK;
    }
    l->scan_upto = checkpoint - l->pos > SCAN_PASS_MAX ? l->pos + SCAN_PASS_MAX : checkpoint;
    while (l->pos < l->scan_upto) {
        size_t want = l->scan_upto - l->pos < SCAN_CHUNK ? (size_t)(l->scan_upto - l->pos) : SCAN_CHUNK;
        l->scan_seen = 0;
        rc = store_read_log(snap, l->pos, want, note_changed, l);
        if (rc != STORE_OK)
            return rc;
        /* fewer than asked for: nothing else up to scan_upto (positions may have gaps) */
        l->pos = l->scan_seen == want ? l->scan_last : l->scan_upto;
    }
    return STORE_OK;
}

/* The changed items (or, after a resync, all) that somebody watches, as spans into l->changed or
 * into a copy of the watched names (*names, to free). */
static size_t watched_changes(live_t *l, span_t **out, uint64_t **at, char (**names)[ID_MAX_LEN])
{
    *out = NULL;
    *at = NULL;
    *names = NULL;
    pthread_mutex_lock(&l->lock);
    size_t cap = l->resync ? l->watched.count : l->changed.count, n = 0;
    span_t *spans = cap ? malloc(cap * sizeof *spans) : NULL;
    uint64_t *changed_at = cap ? malloc(cap * sizeof *changed_at) : NULL;
    if (l->resync && cap)
        *names = malloc(cap * sizeof **names);
    if (cap && (!spans || !changed_at || (l->resync && !*names))) {
        pthread_mutex_unlock(&l->lock);
        free(spans);
        free(changed_at);
        free(*names);
        *names = NULL;
        return 0;
    }
    if (l->resync) {
        for (size_t i = 0; i < l->watched.nslots; i++) {
            const strmap_slot_t *s = &l->watched.slots[i];
            if (!s->used)
                continue;
            memcpy((*names)[n], s->key, s->len);
            changed_at[n] = UINT64_MAX;
            spans[n] = (span_t){(*names)[n], s->len};
            n++;
        }
    } else {
        for (size_t i = 0; i < l->changed.count; i++) {
            span_t item = {l->changed.entries[i].item, l->changed.entries[i].item_len};
            if (!strmap_find(&l->watched, item))
                continue;
            changed_at[n] = (uint64_t)l->changed.entries[i].deltas[KIND_NONE];
            spans[n++] = item;
        }
    }
    pthread_mutex_unlock(&l->lock);
    *out = spans;
    *at = changed_at;
    return n;
}

static live_request_t *take_pending(live_t *l)
{
    pthread_mutex_lock(&l->lock);
    live_request_t *list = l->pending;
    l->pending = l->pending_tail = NULL;
    pthread_mutex_unlock(&l->lock);
    return list;
}

typedef struct {
    uint64_t token;
} initial_arg_t;

static void emit_initial(live_t *l, uint64_t cursor, const live_item_t *items, size_t n, void *arg)
{
    l->sink.on_initial(l->sink.arg, ((initial_arg_t *)arg)->token, cursor, items, n);
}

static void report(live_t *l, int rc)
{
    if (rc != STORE_OK) {
        atomic_fetch_add_explicit(&l->stats.errors, 1, memory_order_relaxed);
        if (!l->failing)
            log_line("level=error event=live-read-failed error=\"%s\" msg=\"live counts wait for the store\"",
                     rc == STORE_UNAVAILABLE ? "the store cannot be reached" : "the store failed");
    } else if (l->failing) {
        log_line("level=info event=live-read-resumed");
    }
    l->failing = rc != STORE_OK;
}

/* One snapshot: the checkpoint; when scan, the log after pos up to it and the counts of the watched
 * items that changed; then the counts of the subscriptions waiting for theirs. The sink is called
 * with the snapshot still open (it only formats and posts). */
static void live_pass(live_t *l, bool scan)
{
    pthread_mutex_lock(&l->lock);
    bool idle = l->watched.count == 0 && !l->pending;
    pthread_mutex_unlock(&l->lock);
    if (idle) { /* nobody watches: nothing to read; the next subscription starts following afresh */
        l->following = false;
        if (l->opt.render_epoch) /* a new subscription starts with what is rendered now */
            l->render_seen = atomic_load(l->opt.render_epoch);
        return;
    }
    store_read_t *snap;
    uint64_t checkpoint = 0;
    int rc = store_read_begin(l->store, &snap);
    if (rc != STORE_OK) {
        report(l, rc);
        return;
    }
    rc = store_read_checkpoint(snap, &checkpoint);
    if (rc == STORE_OK && !l->following) {
        l->pos = checkpoint; /* what came before is in the counts a subscription starts with */
        l->following = true;
    }
    if (rc == STORE_OK && checkpoint < l->pos)
        l->pos = checkpoint; /* a store moved back (a restore): follow from there */
    uint64_t epoch = l->opt.render_epoch ? atomic_load(l->opt.render_epoch) : 0;
    if (epoch != l->render_seen)
        l->resync = true; /* what is rendered for an item changed: every watched item again */
    if (rc == STORE_OK && scan && (checkpoint > l->pos || l->resync)) {
        uint64_t before = l->pos;
        rc = scan_log(l, snap, checkpoint);
        if (rc == STORE_OK) {
            span_t *items;
            uint64_t *at;
            char(*names)[ID_MAX_LEN];
            size_t n = watched_changes(l, &items, &at, &names);
            rc = read_and_emit(l, snap, checkpoint, items, at, n, emit_changes, NULL);
            free(items);
            free(at);
            free(names);
        }
        if (rc != STORE_OK)
            l->pos = before; /* read them again next time */
        else {
            l->resync = false;
            l->render_seen = epoch;
        }
        itemmap_free(&l->changed);
    }
    live_request_t *req = rc == STORE_OK ? take_pending(l) : NULL;
    while (req) {
        live_request_t *next = req->next;
        span_t items[LIVE_IDS_MAX];
        for (size_t i = 0; i < req->n; i++)
            items[i] = (span_t){req->ids[i], req->lens[i]};
        initial_arg_t arg = {req->token};
        if (rc == STORE_OK)
            rc = read_and_emit(l, snap, checkpoint, items, NULL, req->n, emit_initial, &arg);
        if (rc != STORE_OK) { /* put it back for the next try */
            pthread_mutex_lock(&l->lock);
            req->next = l->pending;
            l->pending = req;
            if (!l->pending_tail)
                l->pending_tail = req;
            pthread_mutex_unlock(&l->lock);
        } else {
            free(req);
        }
        req = next;
    }
    store_read_end(snap);
    if (rc == STORE_OK) {
        atomic_store_explicit(&l->stats.cursor, checkpoint, memory_order_relaxed);
        atomic_fetch_add_explicit(&l->stats.passes, 1, memory_order_relaxed);
    }
    report(l, rc);
}

static void *live_main(void *arg)
{
    live_t *l = arg;
    thread_set_name("tally-live");
    uint64_t next_pass = mono_ms(), next_keepalive = mono_ms() + l->opt.keepalive_ms;
    pthread_mutex_lock(&l->lock);
    while (!l->stopping) {
        uint64_t now = mono_ms();
        bool pass = now >= next_pass, initial = l->pending != NULL, keepalive = now >= next_keepalive;
        if (!pass && !initial && !keepalive) {
            uint64_t until = next_pass < next_keepalive ? next_pass : next_keepalive;
            struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, until - now);
            pthread_cond_timedwait(&l->wake, &l->lock, &deadline);
            continue;
        }
        pthread_mutex_unlock(&l->lock);
        if (pass || initial)
            live_pass(l, pass);
        if (pass)
            next_pass = now + l->opt.interval_ms;
        if (keepalive) {
            l->sink.on_keepalive(l->sink.arg);
            next_keepalive = now + l->opt.keepalive_ms;
        }
        pthread_mutex_lock(&l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

static void live_free(live_t *l)
{
    for (live_request_t *r = l->pending, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    strmap_free(&l->watched);
    itemmap_free(&l->changed);
    free(l->counts);
    free(l->rows);
    free(l->out);
    free(l);
}

int live_start(store_t *store, const kinds_t *kinds, const live_options_t *opt, const live_sink_t *sink, live_t **out)
{
    live_t *l = calloc(1, sizeof *l);
    if (!l)
        return -1;
    l->store = store;
    l->kinds = kinds;
    l->opt = *opt;
    l->render_seen = opt->render_epoch ? atomic_load(opt->render_epoch) : 0;
    if (l->opt.interval_ms == 0)
        l->opt.interval_ms = 1;
    if (l->opt.keepalive_ms == 0)
        l->opt.keepalive_ms = 1;
    l->sink = *sink;
    l->counts = calloc(READ_CHUNK, sizeof *l->counts);
    l->rows = calloc(READ_CHUNK, sizeof *l->rows);
    l->out = calloc(READ_CHUNK, sizeof *l->out);
    if (!l->counts || !l->rows || !l->out) {
        live_free(l);
        return -1;
    }
    pthread_mutex_init(&l->lock, NULL);
    clock_cond_init_monotonic(&l->wake);
    if (pthread_create(&l->thread, NULL, live_main, l) != 0) {
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->wake);
        live_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

void live_halt(live_t *l)
{
    if (!l || l->halted)
        return;
    thread_stop_join(&l->lock, &l->wake, &l->stopping, l->thread);
    l->halted = true;
}

void live_stop(live_t *l)
{
    if (!l)
        return;
    live_halt(l);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->wake);
    live_free(l);
}
