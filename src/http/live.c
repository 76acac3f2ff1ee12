/* live.c — the live streams: opening one (caps, ids), each HTTP thread's index of its streams by
 * item, and the sink of engine/live.c, which renders events on the live thread and posts them to
 * the HTTP threads. A stream's state is touched only on its own HTTP thread; the caps are atomics
 * and one short lock (per-client counts). */
#include "http/live.h"

#include <stdlib.h>
#include <time.h>

#include "core/sse.h"
#include "core/strmap.h"
#include "http/items.h"

#define LIVE_THREADS_MAX 64 /* server.c's MAX_THREADS */
#define TOKEN_THREAD_BITS 6 /* a token is (serial << 6) | thread */
#define PEER_MAX FORWARDED_KEY_MAX
#define LIVE_END_TICK_MS 10 /* shutdown: how often live_http_wait_ended looks */

typedef struct live_stream live_stream_t;

/* One item of a stream, linked among the thread's subscriptions to that item. */
typedef struct sub_node {
    live_stream_t *stream;
    struct sub_node *prev, *next;
} sub_node_t;

struct live_stream {
    uint64_t token;
    int thread;
    http_stream_t *http;
    bool primed;     /* its initial counts went out: changes may follow */
    bool subscribed; /* live_subscribe took its items */
    uint64_t since;  /* the cursor of its initial counts: changes up to it are in them */
    size_t n;
    span_t items[LIVE_IDS_MAX]; /* into names */
    sub_node_t nodes[LIVE_IDS_MAX];
    char client[PEER_MAX];
    size_t client_len;
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

/* A stream's initial counts, posted to its thread. */
typedef struct {
    uint64_t token, cursor;
    textbuf_t text;
} live_initial_t;

static struct {
    app_t *app;
    live_t *engine;
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
        live_unsubscribe(live.engine, s->token, s->items, s->n);
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
            if (node->stream->primed && b->changed_at[i] > node->stream->since)
                stream_send(node->stream, b->buf.buf + b->text_at[i], b->text_len[i], 1);
        }
    }
    batch_unref(b);
}

/* One item's event, under its policy in force (hidden counts are null: a stream is public). */
static void counts_event(textbuf_t *b, uint64_t cursor, span_t item, const int64_t *counts)
{
    policy_t p;
    bool has = policies_lookup(live.app->policies, item, &p);
    sse_counts_event_policy(b, cursor, live.app->kinds, item, counts, has ? &p : NULL);
}

static void sink_changes(void *arg, uint64_t cursor, const live_item_t *items, size_t n)
{
    (void)arg;
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
        counts_event(&b->buf, cursor, items[i].item, items[i].counts);
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
    if (s && !s->primed) {
        s->primed = true;
        s->since = m->cursor;
        stream_send(s, m->text.buf, m->text.len, s->n);
    }
    free(m->text.buf);
    free(m);
}

static void sink_initial(void *arg, uint64_t token, uint64_t cursor, const live_item_t *items, size_t n)
{
    (void)arg;
    live_initial_t *m = calloc(1, sizeof *m);
    if (!m)
        return; /* the stream stays without its first events; its client reconnects */
    m->token = token;
    m->cursor = cursor;
    for (size_t i = 0; i < n; i++)
        counts_event(&m->text, cursor, items[i].item, items[i].counts);
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
    (void)arg;
    if (atomic_load(&live.open) == 0)
        return;
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
        http_stream_end(s->http);
    }
    atomic_fetch_add(&live.threads_ended, 1);
}

/* Shutdown, past the time given to end cleanly: the streams left are closed. */
static void on_drop_all(void *arg)
{
    (void)arg;
    live_thread_t *t = &live.threads[http_thread_index()];
    for (live_stream_t *s = t->streams, *next; s; s = next) {
        next = s->next; /* a dropped stream may unlink itself at once */
        http_stream_drop(s->http);
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
    if (!live.engine || atomic_load(&live.closing)) {
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
        s->items[s->n++] = (span_t){s->names + at, id.len};
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
    s->subscribed = !retry.failed && live_subscribe(live.engine, s->token, s->items, s->n) == 0;
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
    return live_start(app->store, app->kinds, &follow, &sink, &live.engine);
}

void live_http_end_all(void)
{
    atomic_store(&live.closing, true);
    live_halt(live.engine); /* nothing is posted after this: the ends below come after every update */
    for (int i = 0; i < http_thread_count(); i++)
        if (http_thread_post(i, on_end_all, NULL) != 0)
            atomic_fetch_add(&live.threads_ended, 1); /* out of memory: its streams are dropped below */
}

size_t live_http_wait_ended(uint64_t timeout_ms)
{
    const struct timespec tick = {0, LIVE_END_TICK_MS * 1000000L};
    bool dropped = false;
    for (uint64_t waited = 0;; waited += LIVE_END_TICK_MS) {
        if (atomic_load(&live.threads_ended) >= http_thread_count() && atomic_load(&live.open) == 0)
            return 0;
        if (waited >= timeout_ms)
            return atomic_load(&live.open);
        if (!dropped && waited >= timeout_ms / 2 && atomic_load(&live.threads_ended) >= http_thread_count()) {
            dropped = true;
            for (int i = 0; i < http_thread_count(); i++)
                http_thread_post(i, on_drop_all, NULL);
        }
        nanosleep(&tick, NULL);
    }
}

void live_http_stop(void)
{
    live_stop(live.engine);
    live.engine = NULL;
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
    if (live.engine) {
        const live_stats_t *st = live_stats(live.engine);
        out->errors = atomic_load_explicit(&st->errors, memory_order_relaxed);
        out->cursor = atomic_load_explicit(&st->cursor, memory_order_relaxed);
    }
}
