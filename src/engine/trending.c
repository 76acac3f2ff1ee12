/* trending.c — bucketed Space-Saving summaries fed from the log; persisted through the writer. */
#include "engine/trending.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "core/itemmap.h"
#include "core/log.h"
#include "core/spacesaving.h"
#include "engine/thread.h"

#define FOLLOW_BATCH 10000
#define FOLLOW_IDLE_MS 1000
#define HOT_BUCKETS 2 /* closed 5 s buckets the hot rate is taken over */
#define NO_STATE_REPLAY_MS (3600ull * 1000)
#define AUX_PREFIX "trend/"
#define AUX_OPEN_KEY "trend/open"

enum { LEVEL_5S, LEVEL_1M, LEVEL_1H, LEVELS };

static const struct {
    uint64_t width_ms;
    size_t nbuckets; /* one more than the window needs: the open bucket */
    bool persist;
} level_shape[LEVELS] = {
    {5000, 13, false},
    {60000, 61, true},
    {3600000, 25, true},
};

typedef struct {
    uint64_t start_ms;          /* 0 = unused */
    spacesaving_t *gain, *loss; /* [KINDS_MAX + 1], summaries initialised on first use */
    spacesaving_t all;          /* every transition (LEVEL_5S only): hot items */
    bool dirty;                 /* changed since persisted */
} bucket_t;

typedef struct {
    bucket_t *ring;
    uint64_t current_start;
} level_t;

/* One shard's follower: its log, its summaries, persisted on that shard. */
typedef struct trend_part {
    store_t *store;
    writer_t *writer;
    const kinds_t *kinds;
    trending_options_t opt;
    pthread_t thread;
    pthread_mutex_t lock; /* guards the levels: the follower writes, queries read */
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    bool dirty, stopping;
    level_t levels[LEVELS];
    uint64_t cursor; /* last log seq consumed */
    uint64_t newest; /* newest log seq seen */
    uint64_t last_persist_ms;
    bool persist_all;    /* a persist failed: the next one writes every closed bucket again (under lock) */
    bool follow_failing; /* trending thread: the last read of the log failed (logged once per outage) */
    /* The store could not be reached to restore (a shard down when the node started): nothing is
     * followed or persisted until it is restored, so that its records are neither replaced by empty
     * summaries nor stood in for by a replay of a log that may be pruned past them. Tried again at
     * each wake-up of the thread. */
    bool restore_pending;
    atomic_uint_fast64_t errors; /* failed store reads and persists, for the metrics */
} trend_part_t;

struct trending {
    size_t n;
    trend_part_t *part[]; /* one per shard, in shard order */
};

/* A failed read or persist: counted, and logged (what names the step). */
static void trending_error(trend_part_t *t, const char *what, int rc)
{
    atomic_fetch_add_explicit(&t->errors, 1, memory_order_relaxed);
    log_line("level=error event=trending-%s error=\"%s\"", what,
             rc == STORE_FULL ? "the store is out of space" : "the store failed");
}

static spacesaving_t *summary(trend_part_t *t, spacesaving_t *s)
{
    if (!s->slots && ss_init(s, t->opt.capacity) != 0)
        return NULL;
    return s;
}

static void bucket_reset(bucket_t *b, uint64_t start_ms)
{
    for (int k = 0; k <= KINDS_MAX; k++) {
        ss_free(&b->gain[k]);
        ss_free(&b->loss[k]);
    }
    ss_free(&b->all);
    b->start_ms = start_ms;
    b->dirty = false;
}

/* The bucket of at_ms at level l, recycled when its slot held an older bucket. */
static bucket_t *bucket_for(trend_part_t *t, int l, uint64_t at_ms)
{
    uint64_t width = level_shape[l].width_ms, start = at_ms - at_ms % width;
    level_t *lv = &t->levels[l];
    if (start < lv->current_start)
        start = lv->current_start; /* a late transition (clock step): counted in the open bucket */
    bucket_t *b = &lv->ring[(start / width) % level_shape[l].nbuckets];
    if (b->start_ms != start)
        bucket_reset(b, start);
    lv->current_start = start;
    return b;
}

static void add_event(trend_part_t *t, const transition_t *tr)
{
    /* as the counts see it: a voided user's reactions neither gain nor lose, a void loses them and a
     * restore gains them back */
    kindset_t from = tr->uncounted & TRANSITION_UNCOUNTED_BEFORE ? KINDSET_EMPTY : tr->from;
    kindset_t to = tr->uncounted & TRANSITION_UNCOUNTED_AFTER ? KINDSET_EMPTY : tr->to;
    for (int l = 0; l < LEVELS; l++) {
        bucket_t *b = bucket_for(t, l, tr->at_ms);
        spacesaving_t *s;
        /* per kind: a user who added it is a gain, one who removed it a loss */
        for (kindset_t joined = to & ~from; joined; joined &= joined - 1)
            if ((s = summary(t, &b->gain[__builtin_ctz(joined)])))
                ss_add(s, tr->item, 1);
        for (kindset_t left = from & ~to; left; left &= left - 1)
            if ((s = summary(t, &b->loss[__builtin_ctz(left)])))
                ss_add(s, tr->item, 1);
        if (l == LEVEL_5S && tr->from != tr->to && (s = summary(t, &b->all))) /* writes, not voids */
            ss_add(s, tr->item, 1);
        b->dirty = true;
    }
}

/* --- persistence: closed buckets once, open buckets with the cursor --- */

typedef struct {
    write_aux_t aux;
    char keys[WRITE_AUX_MAX][64];
    uint8_t *values[WRITE_AUX_MAX];
    char del_from[64], del_to[64];
} persist_t;

static void persist_add(persist_t *p, const char *key, uint8_t *value, size_t len)
{
    if (p->aux.n == WRITE_AUX_MAX) {
        free(value);
        return;
    }
    snprintf(p->keys[p->aux.n], sizeof p->keys[0], "%s", key);
    p->values[p->aux.n] = value;
    p->aux.keys[p->aux.n] = span_of(p->keys[p->aux.n]);
    p->aux.values[p->aux.n] = (span_t){(const char *)value, len};
    p->aux.n++;
}

/* trend/b/<level>/<start, 16 hex>/<kind>/<g|l> */
static void persist_bucket(trend_part_t *t, persist_t *p, int l, const bucket_t *b, const char *prefix)
{
    for (int k = 1; k <= t->kinds->count; k++) {
        for (int side = 0; side < 2; side++) {
            const spacesaving_t *s = side ? &b->loss[k] : &b->gain[k];
            uint8_t *buf;
            size_t len;
            char key[64];
            if (!s->n || ss_encode(s, &buf, &len) != 0)
                continue;
            snprintf(key, sizeof key, "%s%d/%016llx/%s/%c", prefix, l, (unsigned long long)b->start_ms,
                     kinds_name(t->kinds, k), side ? 'l' : 'g');
            persist_add(p, key, buf, len);
        }
    }
}

/* Called with t->lock held: collects what to persist; the write happens after unlocking. */
static persist_t *persist_collect(trend_part_t *t, uint64_t now)
{
    persist_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->aux.delete_from = span_of(AUX_PREFIX "o/");
    p->aux.delete_to = span_of(AUX_PREFIX "o0"); /* the previous open buckets go */
    for (int l = 0; l < LEVELS; l++) {
        if (!level_shape[l].persist)
            continue;
        for (size_t i = 0; i < level_shape[l].nbuckets; i++) {
            bucket_t *b = &t->levels[l].ring[i];
            if (!b->start_ms)
                continue;
            bool open = b->start_ms == t->levels[l].current_start;
            if (open)
                persist_bucket(t, p, l, b, AUX_PREFIX "o/");
            else if (b->dirty || t->persist_all) {
                persist_bucket(t, p, l, b, AUX_PREFIX "b/");
                b->dirty = false;
            }
        }
    }
    uint8_t *cursor = malloc(16);
    if (cursor) {
        memcpy(cursor, &t->cursor, 8);
        memcpy(cursor + 8, &now, 8);
        persist_add(p, AUX_OPEN_KEY, cursor, 16);
    }
    return p;
}

/* A command taken and committed: the writer answers 200 only after a durable commit. */
static bool persist_call(trend_part_t *t, write_cmd_t *cmd)
{
    bool ok = writer_call(t->writer, cmd) == 0 && cmd->answer.status == 200;
    answer_free(&cmd->answer);
    return ok;
}

/* Writes what persist_collect gathered (p may be NULL: it ran out of memory). A failure is counted
 * and logged, and the next persist writes every closed bucket again: the ones collected here were
 * marked clean and would otherwise be missing after a restart. */
static void persist_write(trend_part_t *t, persist_t *p, uint64_t now)
{
    bool ok = p != NULL;
    if (!p)
        goto done;
    write_cmd_t cmd = {.type = WRITE_AUX, .aux = &p->aux};
    ok = persist_call(t, &cmd);
    /* Closed buckets older than the longest window go (a second command: its own range). */
    persist_t old = {0};
    uint64_t horizon = now > 26 * 3600000ull ? now - 26 * 3600000ull : 0;
    for (int l = 1; l < LEVELS; l++) {
        snprintf(old.del_from, sizeof old.del_from, AUX_PREFIX "b/%d/", l);
        snprintf(old.del_to, sizeof old.del_to, AUX_PREFIX "b/%d/%016llx", l, (unsigned long long)horizon);
        old.aux.delete_from = span_of(old.del_from);
        old.aux.delete_to = span_of(old.del_to);
        write_cmd_t del = {.type = WRITE_AUX, .aux = &old.aux};
        ok = persist_call(t, &del) && ok; /* old buckets left behind are only ignored when read */
    }
    for (size_t i = 0; i < p->aux.n; i++)
        free(p->values[i]);
    free(p);
done:
    if (!ok)
        trending_error(t, "persist-failed", STORE_ERROR);
    pthread_mutex_lock(&t->lock);
    t->persist_all = !ok;
    pthread_mutex_unlock(&t->lock);
}

/* --- restoring --- */

static int restore_one(void *arg, span_t key, span_t value)
{
    trend_part_t *t = arg;
    if (span_eq_str(key, AUX_OPEN_KEY)) {
        if (value.len >= 8)
            memcpy(&t->cursor, value.ptr, 8);
        return 0;
    }
    int l;
    unsigned long long start;
    char kind[KIND_NAME_MAX + 1], side;
    char text[128];
    if (key.len >= sizeof text)
        return 0;
    memcpy(text, key.ptr, key.len);
    text[key.len] = '\0';
    const char *rest = text + strlen(AUX_PREFIX) + 2; /* past "trend/b/" or "trend/o/" */
    if (sscanf(rest, "%d/%16llx/%32[a-z0-9_]/%c", &l, &start, kind, &side) != 4 || l < 0 || l >= LEVELS)
        return 0;
    int k = kinds_find(t->kinds, span_of(kind), false);
    if (k < 0 || start + level_shape[l].width_ms * level_shape[l].nbuckets < wall_ms())
        return 0; /* a removed kind, or too old to matter */
    bucket_t *b = bucket_for(t, l, start);
    spacesaving_t *s = side == 'l' ? &b->loss[k] : &b->gain[k];
    ss_free(s);
    if (ss_decode(s, t->opt.capacity, (const uint8_t *)value.ptr, value.len) != 0)
        ss_init(s, t->opt.capacity);
    /* A bucket that was open is persisted again, whether or not the log opens it again: written as
     * open only when it is the open one, the next persist (which replaces every open bucket) would
     * otherwise drop it, and a second restart without writes in between would find nothing. */
    if (text[strlen(AUX_PREFIX)] == 'o')
        b->dirty = true;
    return 0;
}

static void levels_clear(trend_part_t *t)
{
    for (int l = 0; l < LEVELS; l++)
        for (size_t i = 0; i < level_shape[l].nbuckets; i++)
            bucket_reset(&t->levels[l].ring[i], 0);
}

/* The persisted summaries and the cursor they end at. When a read fails, whatever was restored
 * goes: summaries without their cursor, replayed from an hour back, would count some entries twice.
 * Trending then starts as if nothing was persisted (and with no snapshot at all, reads the log
 * from its start). */
static void restore(trend_part_t *t)
{
    store_read_t *snap;
    int rc = store_read_begin(t->store, &snap);
    if (rc == STORE_UNAVAILABLE) { /* not reached (yet): counted each time, logged once */
        if (!t->restore_pending)
            trending_error(t, "restore-failed", rc);
        else
            atomic_fetch_add_explicit(&t->errors, 1, memory_order_relaxed);
        t->restore_pending = true;
        return;
    }
    if (t->restore_pending)
        log_line("level=info event=trending-restore-resumed");
    t->restore_pending = false;
    if (rc != STORE_OK) {
        trending_error(t, "restore-failed", rc);
        return;
    }
    rc = store_read_aux(snap, span_of(AUX_PREFIX "b/"), restore_one, t);
    if (rc == STORE_OK)
        rc = store_read_aux(snap, span_of(AUX_PREFIX "o/"), restore_one, t);
    if (rc == STORE_OK)
        rc = store_read_aux(snap, span_of(AUX_OPEN_KEY), restore_one, t);
    if (rc != STORE_OK) {
        trending_error(t, "restore-failed", rc);
        levels_clear(t);
        t->cursor = 0;
    }
    for (int l = 0; l < LEVELS; l++)
        t->levels[l].current_start = 0; /* the log decides which bucket is open */
    if (t->cursor == 0) {               /* nothing persisted: start an hour back rather than read a day of log */
        uint64_t seq = 0;
        rc = store_read_log_seek(snap, wall_ms() - NO_STATE_REPLAY_MS, &seq);
        if (rc != STORE_OK)
            trending_error(t, "restore-failed", rc); /* the cursor stays 0: the whole log is read */
        else if (seq > 0)
            t->cursor = seq - 1;
    }
    store_read_end(snap);
}

/* --- following the log --- */

static int follow_one(void *arg, uint64_t seq, const transition_t *tr)
{
    trend_part_t *t = arg;
    add_event(t, tr);
    t->cursor = seq;
    return 0;
}

/* A failed read of the log is counted every time and logged once per outage; the cursor stays where
 * the last entry read left it, and the next wake-up tries again. */
static bool follow_result(trend_part_t *t, int rc)
{
    if (rc != STORE_OK && !t->follow_failing)
        trending_error(t, "follow-failed", rc);
    else if (rc != STORE_OK)
        atomic_fetch_add_explicit(&t->errors, 1, memory_order_relaxed);
    else if (t->follow_failing)
        log_line("level=info event=trending-follow-resumed");
    t->follow_failing = rc != STORE_OK;
    return rc == STORE_OK;
}

/* Reads what the log has after the cursor; returns true when more may be there. */
static bool follow(trend_part_t *t)
{
    store_read_t *snap;
    uint64_t first = 0, last = 0;
    int rc = store_read_begin(t->store, &snap);
    if (rc == STORE_OK && (rc = store_read_log_bounds(snap, &first, &last)) != STORE_OK)
        store_read_end(snap);
    if (rc != STORE_OK) {
        follow_result(t, rc);
        return false;
    }
    pthread_mutex_lock(&t->lock);
    if (first > t->cursor + 1)
        t->cursor = first - 1; /* pruned under us: carry on from what is there */
    uint64_t before = t->cursor;
    rc = store_read_log(snap, t->cursor, FOLLOW_BATCH, follow_one, t);
    t->newest = last;
    pthread_mutex_unlock(&t->lock);
    store_read_end(snap);
    return follow_result(t, rc) && t->cursor - before == FOLLOW_BATCH;
}

static void *trending_main(void *arg)
{
    trend_part_t *t = arg;
    thread_set_name("tally-trending");
    for (;;) {
        if (t->restore_pending) {
            pthread_mutex_lock(&t->lock); /* restoring fills the levels that queries read */
            restore(t);
            pthread_mutex_unlock(&t->lock);
        }
        while (!t->restore_pending && follow(t))
            ;
        uint64_t now = wall_ms();
        if (!t->restore_pending && now - t->last_persist_ms >= level_shape[LEVEL_1M].width_ms) {
            pthread_mutex_lock(&t->lock);
            persist_t *p = persist_collect(t, now);
            pthread_mutex_unlock(&t->lock);
            persist_write(t, p, now);
            t->last_persist_ms = now;
        }
        pthread_mutex_lock(&t->wake_lock);
        if (t->stopping) {
            pthread_mutex_unlock(&t->wake_lock);
            return NULL;
        }
        if (!t->dirty) {
            struct timespec until = clock_deadline(CLOCK_REALTIME, FOLLOW_IDLE_MS);
            pthread_cond_timedwait(&t->wake, &t->wake_lock, &until);
        }
        t->dirty = false;
        pthread_mutex_unlock(&t->wake_lock);
    }
}

static void part_notify(trend_part_t *t)
{
    pthread_mutex_lock(&t->wake_lock);
    t->dirty = true;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->wake_lock);
}

static int part_start(store_t *store, writer_t *writer, const kinds_t *kinds, const trending_options_t *opt,
                      trend_part_t **out)
{
    trend_part_t *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->store = store;
    t->writer = writer;
    t->kinds = kinds;
    t->opt = *opt;
    for (int l = 0; l < LEVELS; l++) {
        t->levels[l].ring = calloc(level_shape[l].nbuckets, sizeof(bucket_t));
        for (size_t i = 0; t->levels[l].ring && i < level_shape[l].nbuckets; i++) {
            t->levels[l].ring[i].gain = calloc(KINDS_MAX + 1, sizeof(spacesaving_t));
            t->levels[l].ring[i].loss = calloc(KINDS_MAX + 1, sizeof(spacesaving_t));
            if (!t->levels[l].ring[i].gain || !t->levels[l].ring[i].loss)
                return -1; /* start-up only: the process exits */
        }
        if (!t->levels[l].ring)
            return -1;
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->wake_lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    restore(t);
    t->last_persist_ms = wall_ms();
    if (pthread_create(&t->thread, NULL, trending_main, t) != 0)
        return -1;
    *out = t;
    return 0;
}

static void part_stop(trend_part_t *t)
{
    if (!t)
        return;
    thread_stop_join(&t->wake_lock, &t->wake, &t->stopping, t->thread);
    /* The writer still runs: persist what is open so that a restart reads little log (unless nothing
     * was restored: what the store holds stays as it is). */
    uint64_t now = wall_ms();
    if (!t->restore_pending) {
        pthread_mutex_lock(&t->lock);
        persist_t *p = persist_collect(t, now);
        pthread_mutex_unlock(&t->lock);
        persist_write(t, p, now);
    }
    for (int l = 0; l < LEVELS; l++) {
        for (size_t i = 0; i < level_shape[l].nbuckets; i++) {
            bucket_reset(&t->levels[l].ring[i], 0);
            free(t->levels[l].ring[i].gain);
            free(t->levels[l].ring[i].loss);
        }
        free(t->levels[l].ring);
    }
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->wake_lock);
    pthread_cond_destroy(&t->wake);
    free(t);
}

/* --- queries --- */

static const struct {
    int level;
    uint64_t span_ms;
} windows[WINDOW_COUNT] = {{LEVEL_5S, 60000}, {LEVEL_1M, 3600000}, {LEVEL_1H, 86400000}};

/* Buckets of the window: those whose start is within span of now. */
static bool in_window(const bucket_t *b, trend_window_t w, uint64_t now)
{
    uint64_t width = level_shape[windows[w].level].width_ms;
    return b->start_ms && b->start_ms + width > now - windows[w].span_ms && b->start_ms <= now;
}

static int entry_cmp(const void *a, const void *b)
{
    const trend_entry_t *x = a, *y = b;
    if (x->gain != y->gain)
        return x->gain > y->gain ? -1 : 1;
    return strcmp(x->item, y->item);
}

/* The entries of sums whose total (deltas[0]) is at least min, largest first, at most limit, into
 * out; with seconds > 0 each also gets its rate. */
static size_t rank(const itemmap_t *sums, int64_t min, double seconds, size_t limit, trend_entry_t *out)
{
    size_t n = 0;
    trend_entry_t *all = calloc(sums->count ? sums->count : 1, sizeof *all);
    if (!all)
        return 0;
    for (size_t e = 0; e < sums->count; e++) {
        const itemmap_entry_t *s = &sums->entries[e];
        if (s->deltas[0] < min)
            continue;
        memcpy(all[n].item, s->item, s->item_len);
        all[n].item[s->item_len] = '\0';
        all[n].gain = s->deltas[0];
        all[n++].rate = seconds > 0 ? (double)s->deltas[0] / seconds : 0;
    }
    qsort(all, n, sizeof *all, entry_cmp);
    if (n > limit)
        n = limit;
    memcpy(out, all, n * sizeof *all);
    free(all);
    return n;
}

static size_t part_top(trend_part_t *t, int kind, trend_window_t window, size_t limit, trend_entry_t *out)
{
    itemmap_t sums = {0};
    uint64_t now = wall_ms();
    const level_t *lv = &t->levels[windows[window].level];
    size_t nb = level_shape[windows[window].level].nbuckets;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < nb; i++) { /* candidates: every item tracked as gaining */
        const bucket_t *b = &lv->ring[i];
        if (!in_window(b, window, now))
            continue;
        const spacesaving_t *g = &b->gain[kind];
        for (size_t c = 0; c < g->n; c++) {
            itemmap_entry_t *e = itemmap_get(&sums, (span_t){g->heap[c].item, g->heap[c].item_len});
            if (e)
                e->deltas[0] += (int64_t)g->heap[c].count;
        }
    }
    for (size_t i = 0; i < nb; i++) { /* their losses */
        const bucket_t *b = &lv->ring[i];
        if (!in_window(b, window, now) || !b->loss[kind].n)
            continue;
        for (size_t e = 0; e < sums.count; e++) {
            const ss_counter_t *c = ss_find(&b->loss[kind], (span_t){sums.entries[e].item, sums.entries[e].item_len});
            if (c)
                sums.entries[e].deltas[0] -= (int64_t)c->count;
        }
    }
    pthread_mutex_unlock(&t->lock);
    size_t n = rank(&sums, 1, 0, limit, out);
    itemmap_free(&sums);
    return n;
}

static double part_error_bound(trend_part_t *t, int kind, trend_window_t window)
{
    uint64_t now = wall_ms(), events = 0;
    const level_t *lv = &t->levels[windows[window].level];
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < level_shape[windows[window].level].nbuckets; i++)
        if (in_window(&lv->ring[i], window, now))
            events += lv->ring[i].gain[kind].total + lv->ring[i].loss[kind].total;
    pthread_mutex_unlock(&t->lock);
    return (double)events / (double)t->opt.capacity;
}

static size_t part_hot(trend_part_t *t, size_t limit, trend_entry_t *out)
{
    itemmap_t sums = {0};
    uint64_t now = wall_ms(), width = level_shape[LEVEL_5S].width_ms;
    uint64_t open = now - now % width, since = open - HOT_BUCKETS * width;
    const level_t *lv = &t->levels[LEVEL_5S];
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < level_shape[LEVEL_5S].nbuckets; i++) {
        const bucket_t *b = &lv->ring[i];
        if (b->start_ms < since || b->start_ms >= open)
            continue; /* only the last closed buckets */
        for (size_t c = 0; c < b->all.n; c++) {
            itemmap_entry_t *e = itemmap_get(&sums, (span_t){b->all.heap[c].item, b->all.heap[c].item_len});
            if (e)
                e->deltas[0] += (int64_t)b->all.heap[c].count;
        }
    }
    pthread_mutex_unlock(&t->lock);
    double seconds = (double)(HOT_BUCKETS * width) / 1000.0;
    size_t n = rank(&sums, (int64_t)ceil(t->opt.hot_threshold * seconds), seconds, limit, out);
    itemmap_free(&sums);
    return n;
}

/* --- the shards together --- */

int trending_start_shards(store_t *const *stores, writer_t *const *writers, size_t n, const kinds_t *kinds,
                          const trending_options_t *opt, trending_t **out)
{
    trending_t *t = calloc(1, sizeof *t + n * sizeof t->part[0]);
    if (!t)
        return -1;
    for (; t->n < n; t->n++)
        if (part_start(stores[t->n], writers[t->n], kinds, opt, &t->part[t->n]) != 0)
            return -1; /* start-up only: the process exits */
    *out = t;
    return 0;
}

int trending_start(store_t *store, writer_t *writer, const kinds_t *kinds, const trending_options_t *opt,
                   trending_t **out)
{
    return trending_start_shards(&store, &writer, 1, kinds, opt, out);
}

void trending_notify(void *arg)
{
    trending_t *t = arg;
    for (size_t k = 0; k < t->n; k++)
        part_notify(t->part[k]);
}

void trending_notify_shard(trending_t *t, size_t k)
{
    if (k < t->n)
        part_notify(t->part[k]);
}

void trending_stop(trending_t *t)
{
    if (!t)
        return;
    for (size_t k = 0; k < t->n; k++)
        part_stop(t->part[k]);
    free(t);
}

/* Each shard's first `limit` of one list (its items are its own: an item lives on one shard), merged
 * largest first and cut to limit. */
static size_t merge_parts(trending_t *t, size_t limit, trend_entry_t *out,
                          size_t (*list)(trend_part_t *p, size_t limit, trend_entry_t *out, const void *arg),
                          const void *arg)
{
    if (t->n == 1)
        return list(t->part[0], limit, out, arg);
    trend_entry_t *all = calloc(t->n * limit, sizeof *all);
    if (!all)
        return 0;
    size_t n = 0;
    for (size_t k = 0; k < t->n; k++)
        n += list(t->part[k], limit, all + n, arg);
    qsort(all, n, sizeof *all, entry_cmp);
    if (n > limit)
        n = limit;
    memcpy(out, all, n * sizeof *all);
    free(all);
    return n;
}

typedef struct {
    int kind;
    trend_window_t window;
} top_arg_t;

static size_t list_top(trend_part_t *p, size_t limit, trend_entry_t *out, const void *arg)
{
    const top_arg_t *a = arg;
    return part_top(p, a->kind, a->window, limit, out);
}

static size_t list_hot(trend_part_t *p, size_t limit, trend_entry_t *out, const void *arg)
{
    (void)arg;
    return part_hot(p, limit, out);
}

size_t trending_top(trending_t *t, int kind, trend_window_t window, size_t limit, trend_entry_t *out)
{
    return merge_parts(t, limit, out, list_top, &(top_arg_t){kind, window});
}

size_t trending_hot(trending_t *t, size_t limit, trend_entry_t *out)
{
    return merge_parts(t, limit, out, list_hot, NULL);
}

/* An item is counted by its shard's summaries alone, so its error is within that shard's bound: the
 * largest of them bounds every listed item. */
double trending_error_bound(trending_t *t, int kind, trend_window_t window)
{
    double bound = 0;
    for (size_t k = 0; k < t->n; k++) {
        double b = part_error_bound(t->part[k], kind, window);
        if (b > bound)
            bound = b;
    }
    return bound;
}

uint64_t trending_errors(const trending_t *t)
{
    uint64_t errors = 0;
    for (size_t k = 0; k < t->n; k++)
        errors += atomic_load_explicit(&t->part[k]->errors, memory_order_relaxed);
    return errors;
}

uint64_t trending_behind(trending_t *t)
{
    uint64_t behind = 0;
    for (size_t k = 0; k < t->n; k++) {
        trend_part_t *p = t->part[k];
        pthread_mutex_lock(&p->lock);
        behind += p->newest > p->cursor ? p->newest - p->cursor : 0;
        pthread_mutex_unlock(&p->lock);
    }
    return behind;
}
