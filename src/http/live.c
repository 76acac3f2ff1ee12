/* live.c — the live streams: opening one (caps, ids), each HTTP thread's index of its streams by
 * item, and the sink of engine/live.c, which renders events on the live thread and posts them to
 * the HTTP threads. A stream's state is touched only on its own HTTP thread; the caps are atomics
 * and one short lock (per-client counts).
 *
 * Across shards: one follower (engine/live.c) per shard, each on its shard's log, checkpoint and
 * counts, and a stream subscribes its items to their shards' followers. An event's id is the entry
 * cursor "S.P" (core/shardmap.h; with one shard the decimal position, as always) of the item's shard
 * S and the checkpoint P its counts are folded up to, so "P at least the write's" includes the write
 * exactly as with one store. What a stream's first counts already hold is kept per item (its shard's
 * cursor), and each shard's first counts come as soon as that shard is read: a shard that is down
 * holds back only its own items. A new stream (a reconnect with Last-Event-ID included) starts with
 * the current counts of every item, as with one shard: no id is taken from the client. */
#include "http/live.h"
#include "http/auth.h"

#include <stdlib.h>
#include <time.h>

#include "core/sse.h"
#include "core/strmap.h"
#include "http/items.h"

#define LIVE_THREADS_MAX 64 /* server.c's MAX_THREADS */
#define TOKEN_THREAD_BITS 6 /* a token is (serial << 6) | thread */
#define PEER_MAX FORWARDED_KEY_MAX
#define LIVE_END_TICK_MS 10    /* shutdown: how often live_http_wait_ended looks */
#define LIVE_STALL_LOOK_MS 250 /* shutdown, past half the wait: how often a stream must have been taken from */

typedef struct live_stream live_stream_t;

/* One item of a stream, linked among the thread's subscriptions to that item. */
typedef struct sub_node {
    live_stream_t *stream;
    struct sub_node *prev, *next;
    uint32_t shard; /* the item's */
    bool primed;    /* its first counts went out: changes may follow */
    uint64_t since; /* the cursor (its shard's) of its first counts: changes up to it are in them */
} sub_node_t;

struct live_stream {
    uint64_t token;
    int thread;
    http_stream_t *http;
    bool subscribed; /* live_subscribe took its items (each shard's follower its own) */
    size_t n;
    span_t items[LIVE_IDS_MAX]; /* into names */
    sub_node_t nodes[LIVE_IDS_MAX];
    char client[PEER_MAX];
    size_t client_len;
    uint64_t taken_seen;        /* shutdown: http_stream_taken at the last look */
    live_stream_t *prev, *next; /* the thread's streams */
    char names[];               /* the ids, one after another */
};

/* One HTTP thread's streams; touched only on that thread. */
typedef struct {
    strmap_t by_item;  /* item → (sub_node_t *) the first subscription */
    strmap_t by_token; /* token (8 bytes) → (live_stream_t *) */
    live_stream_t *streams;
} live_thread_t;

/* Changes of one pass chunk, shared by every thread it is posted to. */
typedef struct {
    atomic_int refs;
    size_t n;
    size_t *name_at, *name_len, *text_at, *text_len; /* [n] into buf */
    uint64_t *changed_at;                            /* [n] */
    textbuf_t buf;
} live_batch_t;

/* A stream's initial counts of one shard's items, posted to its thread. */
typedef struct {
    uint64_t token, cursor;
    uint32_t shard;
    textbuf_t text;
} live_initial_t;

static struct {
    app_t *app;
    size_t nengines;
    live_t *engine[SHARD_MAX];         /* shard k's follower */
    uint32_t shard_of_sink[SHARD_MAX]; /* [k] = k: the sink's argument, which shard it hears from */
    live_http_options_t opt;
    atomic_size_t open;
    atomic_bool closing;
    atomic_int threads_ended; /* HTTP threads that ran on_end_all (shutdown) */
    atomic_uint_fast64_t serial, opened, events, dropped, refused;
    pthread_mutex_t clients_lock;
    strmap_t clients; /* client address → streams open */
    live_thread_t threads[LIVE_THREADS_MAX];
} live = {.clients_lock = PTHREAD_MUTEX_INITIALIZER};

/* --- a thread's index --- */

static span_t token_key(const uint64_t *token)
{
    return (span_t){(const char *)token, sizeof *token};
}

static void index_add(live_thread_t *t, live_stream_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        sub_node_t *node = &s->nodes[i];
        node->stream = s;
        node->prev = NULL;
        uint64_t *head = strmap_get(&t->by_item, s->items[i]);
        if (!head) { /* out of memory: this item goes without updates */
            node->next = node->prev = node;
            continue;
        }
        node->next = (sub_node_t *)(uintptr_t)*head;
        if (node->next)
            node->next->prev = node;
        *head = (uintptr_t)node;
    }
    uint64_t *slot = strmap_get(&t->by_token, token_key(&s->token));
    if (slot)
        *slot = (uintptr_t)s;
    s->next = t->streams;
    s->prev = NULL;
    if (t->streams)
        t->streams->prev = s;
    t->streams = s;
}

static void index_remove(live_thread_t *t, live_stream_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        sub_node_t *node = &s->nodes[i];
        if (node->next == node) /* never linked */
            continue;
        if (node->next)
            node->next->prev = node->prev;
        if (node->prev) {
            node->prev->next = node->next;
        } else if (node->next) {
            uint64_t *head = strmap_find(&t->by_item, s->items[i]);
            if (head)
                *head = (uintptr_t)node->next;
        } else {
            strmap_delete(&t->by_item, s->items[i]);
        }
    }
    strmap_delete(&t->by_token, token_key(&s->token));
    if (s->prev)
        s->prev->next = s->next;
    else
        t->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
}

/* --- caps --- */

static void client_release(span_t client)
{
    pthread_mutex_lock(&live.clients_lock);
    uint64_t *n = strmap_find(&live.clients, client);
    if (n && --*n == 0)
        strmap_delete(&live.clients, client);
    pthread_mutex_unlock(&live.clients_lock);
}

/* Takes a slot of the global cap and of the client's. */
static bool caps_take(span_t client)
{
    if (atomic_fetch_add(&live.open, 1) >= live.opt.max_streams) {
        atomic_fetch_sub(&live.open, 1);
        return false;
    }
    pthread_mutex_lock(&live.clients_lock);
    uint64_t *n = strmap_get(&live.clients, client);
    bool ok = n && *n < live.opt.max_streams_per_client;
    if (ok)
        ++*n;
    else if (n && *n == 0)
        strmap_delete(&live.clients, client);
    pthread_mutex_unlock(&live.clients_lock);
    if (!ok)
        atomic_fetch_sub(&live.open, 1);
    return ok;
}

/* Whether caps_take would take a slot now, taking none (a HEAD answers what its GET would). */
static bool caps_would_admit(span_t client)
{
    if (atomic_load(&live.open) >= live.opt.max_streams)
        return false;
    pthread_mutex_lock(&live.clients_lock);
    const uint64_t *n = strmap_find(&live.clients, client);
    bool ok = (n ? *n : 0) < live.opt.max_streams_per_client;
    pthread_mutex_unlock(&live.clients_lock);
    return ok;
}

/* --- a stream's subscriptions (its thread) --- */

/* The stream's items on the first shard not done yet (in the stream's order), into out: how many,
 * with *shard that shard, now done; 0 when every shard is done. */
static size_t next_group(const live_stream_t *s, bool *done, uint32_t *shard, span_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t k = s->nodes[i].shard;
        if (done[k] || (n && k != *shard))
            continue;
        *shard = k;
        out[n++] = s->items[i];
    }
    if (n)
        done[*shard] = true;
    return n;
}

/* Unsubscribes the stream's items from every shard's follower but those skip names. */
static void stream_unsubscribe(live_stream_t *s, const bool *skip)
{
    bool done[SHARD_MAX];
    span_t group[LIVE_IDS_MAX];
    uint32_t k;
    size_t n;
    memcpy(done, skip, sizeof done);
    while ((n = next_group(s, done, &k, group)) > 0)
        live_unsubscribe(live.engine[k], s->token, group, n);
}

/* Subscribes the stream's items to their shards' followers: true, or false having undone it all. */
static bool stream_subscribe(live_stream_t *s)
{
    bool done[SHARD_MAX] = {0};
    span_t group[LIVE_IDS_MAX];
    uint32_t k;
    size_t n;
    while ((n = next_group(s, done, &k, group)) > 0) {
        if (live_subscribe(live.engine[k], s->token, group, n) != 0) { /* out of memory */
            bool skip[SHARD_MAX];
            for (size_t j = 0; j < SHARD_MAX; j++)
                skip[j] = !done[j] || j == k; /* the shards subscribed are the others done */
            stream_unsubscribe(s, skip);
            return false;
        }
    }
    return true;
}

/* --- a stream's writes (its thread) --- */

/* Writes text; a stream that has too much unsent is dropped (and may be gone after this call). */
static void stream_send(live_stream_t *s, const char *text, size_t len, size_t events)
{
    int rc = http_stream_write(s->http, text, len);
    if (rc < 0)
        atomic_fetch_add_explicit(&live.dropped, 1, memory_order_relaxed);
    else if (rc == 0)
        atomic_fetch_add_explicit(&live.events, events, memory_order_relaxed);
}

/* server.c: the stream is over (client gone, dropped or ended). */
static void stream_on_end(void *arg)
{
    live_stream_t *s = arg;
    index_remove(&live.threads[s->thread], s);
    if (s->subscribed)
        stream_unsubscribe(s, (bool[SHARD_MAX]){0});
    client_release((span_t){s->client, s->client_len});
    atomic_fetch_sub(&live.open, 1);
    free(s);
}

/* --- the sink (live thread) and its messages (HTTP threads) --- */

static void batch_unref(live_batch_t *b)
{
    if (atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    free(b->name_at);
    free(b->changed_at);
    free(b->buf.buf);
    free(b);
}

static void on_batch(void *arg)
{
    live_batch_t *b = arg;
    live_thread_t *t = &live.threads[http_thread_index()];
    for (size_t i = 0; i < b->n; i++) {
        uint64_t *head = strmap_find(&t->by_item, (span_t){b->buf.buf + b->name_at[i], b->name_len[i]});
        for (sub_node_t *node = head ? (sub_node_t *)(uintptr_t)*head : NULL, *next; node; node = next) {
            next = node->next; /* a dropped stream unlinks itself; another stream's node stays */
            if (node->primed && b->changed_at[i] > node->since)
                stream_send(node->stream, b->buf.buf + b->text_at[i], b->text_len[i], 1);
        }
    }
    batch_unref(b);
}

/* One item's event, under its policy in force (hidden counts are null: a stream is public); its id
 * the entry cursor of its shard's position cursor. */
static void counts_event(textbuf_t *b, uint32_t shard, uint64_t cursor, span_t item, const int64_t *counts)
{
    policy_t p;
    char id[SHARD_CURSOR_MAX];
    int len = shard_cursor_format((uint32_t)live.nengines, shard, cursor, id, sizeof id);
    if (len < 0) {
        b->failed = true; /* a position past the cursor's range: no event rather than a wrong id */
        return;
    }
    bool has = policies_lookup(live.app->policies, item, &p);
    sse_counts_event_id(b, (span_t){id, (size_t)len}, live.app->kinds, item, counts, has ? &p : NULL);
}

static void sink_changes(void *arg, uint64_t cursor, const live_item_t *items, size_t n)
{
    uint32_t shard = *(const uint32_t *)arg;
    if (atomic_load(&live.open) == 0 || n == 0)
        return;
    live_batch_t *b = calloc(1, sizeof *b);
    size_t *arrays = b ? calloc(4 * n, sizeof *arrays) : NULL;
    uint64_t *changed_at = arrays ? calloc(n, sizeof *changed_at) : NULL;
    if (!changed_at) {
        free(arrays);
        free(b);
        return; /* out of memory: these changes are lost to the streams (their counts come with the next change) */
    }
    b->changed_at = changed_at;
    b->name_at = arrays, b->name_len = arrays + n, b->text_at = arrays + 2 * n, b->text_len = arrays + 3 * n;
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        b->changed_at[i] = items[i].changed_at;
        b->name_at[i] = b->buf.len;
        b->name_len[i] = items[i].item.len;
        textbuf_append(&b->buf, items[i].item.ptr, items[i].item.len);
        b->text_at[i] = b->buf.len;
        counts_event(&b->buf, shard, cursor, items[i].item, items[i].counts);
        b->text_len[i] = b->buf.len - b->text_at[i];
    }
    int threads = http_thread_count();
    atomic_store(&b->refs, threads + 1);
    for (int i = 0; i < threads; i++)
        if (b->buf.failed || http_thread_post(i, on_batch, b) != 0)
            batch_unref(b);
    batch_unref(b);
}

static void on_initial(void *arg)
{
    live_initial_t *m = arg;
    live_thread_t *t = &live.threads[http_thread_index()];
    uint64_t *slot = strmap_find(&t->by_token, token_key(&m->token));
    live_stream_t *s = slot ? (live_stream_t *)(uintptr_t)*slot : NULL;
    size_t events = 0;
    for (size_t i = 0; s && i < s->n; i++) {
        sub_node_t *node = &s->nodes[i];
        if (node->shard != m->shard || node->primed)
            continue;
        node->primed = true;
        node->since = m->cursor;
        events++;
    }
    if (events)
        stream_send(s, m->text.buf, m->text.len, events);
    free(m->text.buf);
    free(m);
}

static void sink_initial(void *arg, uint64_t token, uint64_t cursor, const live_item_t *items, size_t n)
{
    live_initial_t *m = calloc(1, sizeof *m);
    if (!m)
        return; /* the stream stays without its first events; its client reconnects */
    m->token = token;
    m->cursor = cursor;
    m->shard = *(const uint32_t *)arg;
    for (size_t i = 0; i < n; i++)
        counts_event(&m->text, m->shard, cursor, items[i].item, items[i].counts);
    int thread = (int)(token & ((1u << TOKEN_THREAD_BITS) - 1));
    if (m->text.failed || http_thread_post(thread, on_initial, m) != 0) {
        free(m->text.buf);
        free(m);
    }
}

static void on_keepalive(void *arg)
{
    (void)arg;
    live_thread_t *t = &live.threads[http_thread_index()];
    for (live_stream_t *s = t->streams, *next; s; s = next) {
        next = s->next;
        stream_send(s, SSE_KEEPALIVE, sizeof SSE_KEEPALIVE - 1, 0);
    }
}

static void sink_keepalive(void *arg)
{
    if (*(const uint32_t *)arg != 0 || atomic_load(&live.open) == 0)
        return; /* one keep-alive per period: shard 0's follower's */
    for (int i = 0; i < http_thread_count(); i++)
        http_thread_post(i, on_keepalive, NULL);
}

/* Shutdown, on each HTTP thread: after every update posted before it (one queue, in order). */
static void on_end_all(void *arg)
{
    (void)arg;
    live_thread_t *t = &live.threads[http_thread_index()];
    for (live_stream_t *s = t->streams, *next; s; s = next) {
        next = s->next;
        s->taken_seen = http_stream_taken(s->http);
        http_stream_end(s->http);
    }
    atomic_fetch_add(&live.threads_ended, 1);
}

/* Shutdown, past half the time given to end cleanly: a stream whose client took nothing since the
 * last look (it stopped reading) is closed; one still reading goes on to its last chunk. */
static void on_drop_stalled(void *arg)
{
    (void)arg;
    live_thread_t *t = &live.threads[http_thread_index()];
    for (live_stream_t *s = t->streams, *next; s; s = next) {
        next = s->next; /* a dropped stream may unlink itself at once */
        uint64_t taken = http_stream_taken(s->http);
        if (taken == s->taken_seen)
            http_stream_drop(s->http);
        else
            s->taken_seen = taken;
    }
}

/* --- the route --- */

void live_http_get(app_t *app, http_request_t *req, span_t query)
{
    auth_t who;
    span_t ids, id;
    char client[PEER_MAX];
    if (!auth_user_or_reply(app, req, false, &who) || !read_rate_or_reply(app, req, &who) ||
        !items_ids_or_reply(req, query, &ids))
        return;
    if (!live.nengines || atomic_load(&live.closing)) {
        reply_problem(req, 503, "unavailable", "the server is shutting down; reconnect shortly");
        return;
    }
    http_client_t from;
    http_client_of(atomic_load(&app->client_rules), req, &from);
    size_t client_len = from.key_len < sizeof client ? from.key_len : sizeof client - 1;
    memcpy(client, from.key, client_len);
    if (span_eq_str(http_req_method(req), "HEAD")) {
        if (caps_would_admit((span_t){client, client_len}))
            http_stream_head(req, "text/event-stream");
        else
            reply_problem(req, 503, "overloaded", "too many live streams are open; reconnect after Retry-After");
        return;
    }
    if (!caps_take((span_t){client, client_len})) {
        atomic_fetch_add_explicit(&live.refused, 1, memory_order_relaxed);
        reply_problem(req, 503, "overloaded", "too many live streams are open; reconnect after Retry-After");
        return;
    }
    live_stream_t *s = calloc(1, sizeof *s + ids.len);
    if (!s) {
        client_release((span_t){client, client_len});
        atomic_fetch_sub(&live.open, 1);
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    size_t at = 0, pos = 0;
    while (s->n < LIVE_IDS_MAX && parse_list_next(ids, &pos, &id)) {
        bool repeat = false;
        for (size_t i = 0; i < s->n && !repeat; i++)
            repeat = span_eq(s->items[i], id);
        if (repeat)
            continue; /* one event per item, whatever how often it was named */
        memcpy(s->names + at, id.ptr, id.len);
        s->items[s->n] = (span_t){s->names + at, id.len};
        s->nodes[s->n++].shard = app_item_shard(app, id)->k;
        at += id.len;
    }
    memcpy(s->client, client, client_len);
    s->client_len = client_len;
    s->thread = http_thread_index();
    s->token = (atomic_fetch_add(&live.serial, 1) << TOKEN_THREAD_BITS) | (uint64_t)s->thread;
    /* the first events (one per item, all at once) never count as a slow reader: the cap is above them
     * at their largest (the longest ids and counts of every configured kind) */
    size_t event_max = LIVE_EVENT_FIXED_BYTES + ID_MAX_LEN + (size_t)app->kinds->count * LIVE_EVENT_PER_KIND_BYTES;
    s->http = http_stream_open(req, "text/event-stream", LIVE_STREAM_BUFFER_BYTES + s->n * event_max, stream_on_end, s);
    if (!s->http) {
        client_release((span_t){client, client_len});
        atomic_fetch_sub(&live.open, 1);
        free(s);
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    atomic_fetch_add_explicit(&live.opened, 1, memory_order_relaxed);
    index_add(&live.threads[s->thread], s);
    textbuf_t retry = {0};
    sse_retry(&retry, SSE_RETRY_MS);
    s->subscribed = !retry.failed && stream_subscribe(s);
    if (s->subscribed)
        stream_send(s, retry.buf, retry.len, 0);
    else
        http_stream_end(s->http); /* out of memory: the client reconnects */
    free(retry.buf);
}

/* --- start, stop, stats --- */

int live_http_start(app_t *app, const live_http_options_t *opt)
{
    live.app = app;
    live.opt = *opt;
    live_sink_t sink = {
        .on_changes = sink_changes,
        .on_initial = sink_initial,
        .on_keepalive = sink_keepalive,
    };
    live_options_t follow = opt->follow;
    if (app->policies) /* a policy change sends every watched item again, under its new policy */
        follow.render_epoch = &policies_stats(app->policies)->epoch;
    for (size_t k = 0; k < app->nshards; k++) {
        live.shard_of_sink[k] = (uint32_t)k;
        sink.arg = &live.shard_of_sink[k];
        if (live_start(app->shard[k].store, app->kinds, &follow, &sink, &live.engine[k]) != 0)
            return -1;
        live.nengines = k + 1;
    }
    return 0;
}

void live_http_end_all(void)
{
    atomic_store(&live.closing, true);
    for (size_t k = 0; k < live.nengines; k++)
        live_halt(live.engine[k]); /* nothing is posted after this: the ends below come after every update */
    for (int i = 0; i < http_thread_count(); i++)
        if (http_thread_post(i, on_end_all, NULL) != 0)
            atomic_fetch_add(&live.threads_ended, 1); /* out of memory: its streams are dropped below */
}

size_t live_http_wait_ended(uint64_t timeout_ms)
{
    const struct timespec tick = {0, LIVE_END_TICK_MS * 1000000L};
    uint64_t next_look = timeout_ms / 2;
    for (uint64_t waited = 0;; waited += LIVE_END_TICK_MS) {
        if (atomic_load(&live.threads_ended) >= http_thread_count() && atomic_load(&live.open) == 0)
            return 0;
        if (waited >= timeout_ms)
            return atomic_load(&live.open);
        if (waited >= next_look && atomic_load(&live.threads_ended) >= http_thread_count()) {
            next_look = waited + LIVE_STALL_LOOK_MS;
            for (int i = 0; i < http_thread_count(); i++)
                http_thread_post(i, on_drop_stalled, NULL);
        }
        nanosleep(&tick, NULL);
    }
}

void live_http_stop(void)
{
    for (size_t k = 0; k < live.nengines; k++) {
        live_stop(live.engine[k]);
        live.engine[k] = NULL;
    }
    live.nengines = 0;
}

void live_http_stats(live_http_stats_t *out)
{
    *out = (live_http_stats_t){
        .open = atomic_load(&live.open),
        .opened = atomic_load_explicit(&live.opened, memory_order_relaxed),
        .events = atomic_load_explicit(&live.events, memory_order_relaxed),
        .dropped = atomic_load_explicit(&live.dropped, memory_order_relaxed),
        .refused = atomic_load_explicit(&live.refused, memory_order_relaxed),
    };
    for (size_t k = 0; k < live.nengines; k++) {
        const live_stats_t *st = live_stats(live.engine[k]);
        out->errors += atomic_load_explicit(&st->errors, memory_order_relaxed);
        out->cursor[k] = atomic_load_explicit(&st->cursor, memory_order_relaxed);
    }
    out->shards = live.nengines;
}
