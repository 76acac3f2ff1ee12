/* changes.c — GET /v1/changes: every transition, paged by cursor, with long polling through the
 * feed threads (no snapshot is held while a poll waits). Each shard's log is in its commit order; a
 * page merges the shards' entries (core/feedmerge.h) and its `next` names a position per shard (the
 * page token, core/shardmap.h: with one shard, the decimal position it has always been). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/feedmerge.h"
#include "core/parse.h"
#include "core/shardmap.h"
#include "http/auth.h"
#include "http/changes.h"

#define CHANGES_LIMIT_DEFAULT 100
#define CHANGES_LIMIT_MAX 1000
#define CHANGES_WAIT_MAX_S 30

typedef struct {
    read_job_t job; /* first: the first page read on a reader thread (app->readers) */
    app_t *app;
    uint64_t wait_ms;
    bool has_after;
    size_t limit;
    uint64_t pos[SHARD_MAX]; /* each shard's position: the `after` token's, then the page's `next` */
    http_pending_t *pending;
    answer_t answer;
    /* A wait registers with every shard's feed: the first wake answers, the last reference frees. */
    atomic_uint refs;
    atomic_bool woken;
} changes_query_t;

/* Reads shard k's entries after q->pos[k] (at most q->limit) into list with a fresh snapshot; without
 * an `after`, q->pos[k] is set first to just before the oldest retained entry. Returns 0, or -1
 * having put the problem in q->answer. */
static int shard_read(changes_query_t *q, size_t k, feedmerge_shard_t *list)
{
    store_read_t *snap;
    uint64_t oldest = 0, newest = 0;
    if (store_read_begin(q->app->shard[k].store, &snap) != STORE_OK) {
        answer_problem(&q->answer, 503, "unavailable", "the store cannot be read");
        return -1;
    }
    int rc = store_read_log_window(snap, &oldest, &newest);
    if (rc == STORE_OK && !q->has_after)
        q->pos[k] = oldest - 1;
    if (rc == STORE_OK && q->pos[k] + 1 < oldest) {
        store_read_end(snap);
        answer_problem(&q->answer, 410, "cursor-expired", "the log no longer holds the changes after that cursor");
        return -1;
    }
    if (rc == STORE_OK && q->pos[k] > newest) {
        store_read_end(snap);
        answer_problem(&q->answer, 400, "invalid-parameter", "after is not a cursor this server gave");
        return -1;
    }
    if (rc == STORE_OK)
        rc = store_read_log(snap, q->pos[k], q->limit, feedmerge_read_fn, list);
    store_read_end(snap);
    if (rc != STORE_OK || list->failed) {
        answer_problem(&q->answer, 500, "internal", "reading the change feed failed");
        return -1;
    }
    return 0;
}

/* Reads one page (each shard with a fresh snapshot of its own) into q->answer, and its positions
 * into q->pos. Returns the number of changes, or -1 when the answer is an error. */
static int changes_page(changes_query_t *q)
{
    uint32_t count = (uint32_t)q->app->nshards;
    feedmerge_shard_t *lists = calloc(count, sizeof *lists);
    if (!lists) {
        answer_problem(&q->answer, 503, "overloaded", "out of memory");
        return -1;
    }
    int n = -1;
    size_t k = 0;
    answer_free(&q->answer);
    for (; k < count; k++) {
        feedmerge_shard_init(&lists[k], q->app->kinds, count, (uint32_t)k);
        if (shard_read(q, k, &lists[k]) != 0)
            goto done;
    }
    textbuf_t text = {0};
    textbuf_lit(&text, "{\"changes\":[");
    n = (int)feedmerge_take(lists, count, q->limit, &text, q->pos, NULL);
    char token[SHARD_TOKEN_MAX];
    int token_len = shard_token_format(q->pos, count, token, sizeof token);
    textbuf_lit(&text, "],\"next\":\"");
    if (token_len > 0)
        textbuf_append(&text, token, (size_t)token_len);
    if (q->app->kinds->mode == REACTION_MODE_MANY)
        textbuf_lit(&text, "\",\"mode\":\"many\"}");
    else
        textbuf_lit(&text, "\",\"mode\":\"one\"}");
    size_t len = 0;
    char *body = textbuf_finish(&text, &len);
    if (token_len <= 0 || !body) {
        free(body);
        answer_problem(&q->answer, 500, "internal", "reading the change feed failed");
        n = -1;
        goto done;
    }
    answer_set_body(&q->answer, 200, ANSWER_JSON, body, len);
done:
    for (size_t i = 0; i < count && i <= k; i++)
        feedmerge_shard_free(&lists[i]);
    free(lists);
    return n;
}

/* Drops a reference to q. References: the request's own until its handling is over, one for the
 * answer (dropped once it is sent) and, while it waits, one per shard's feed wait. */
static void query_unref(void *arg)
{
    changes_query_t *q = arg;
    if (atomic_fetch_sub(&q->refs, 1) != 1)
        return;
    answer_free(&q->answer);
    free(q);
}

/* Sends the page q->answer holds, unless it was sent (or is being read by a wake) already. */
static bool answer_once(changes_query_t *q)
{
    if (atomic_exchange(&q->woken, true))
        return false;
    http_pending_respond(q->pending, &q->answer, query_unref, q);
    return true;
}

/* A feed thread: new changes on its shard, the wait ran out, or shutdown. The first wake reads the
 * page and answers; each wake drops its reference. */
static void changes_wake(void *arg)
{
    changes_query_t *q = arg;
    if (!atomic_exchange(&q->woken, true)) {
        changes_page(q);
        http_pending_respond(q->pending, &q->answer, query_unref, q);
    }
    query_unref(q);
}

/* After the first page: nothing yet and a wait asked for → wait on every shard's feed thread from
 * where the empty page ended (q->pending is deferred); else answer. Any thread. */
static void changes_first_done(changes_query_t *q, int n)
{
    if (n != 0 || q->wait_ms == 0) {
        answer_once(q); /* the request's reference becomes the answer's */
        return;
    }
    q->has_after = true;
    size_t count = q->app->nshards;
    atomic_fetch_add(&q->refs, (unsigned)count + 1); /* the answer's and each wait's, before any can wake */
    bool refused = false;
    for (size_t k = 0; k < count; k++)
        if (feed_wait(q->app->shard[k].feed, q->pos[k], q->wait_ms, changes_wake, q) != 0) {
            refused = true; /* shutting down: no wake for this one */
            query_unref(q);
        }
    if (refused)
        answer_once(q); /* the empty page at once */
    query_unref(q);
}

static void changes_job(read_job_t *job)
{
    changes_query_t *q = (changes_query_t *)job;
    changes_first_done(q, changes_page(q));
}

static bool number_param_or_reply(http_request_t *req, span_t query, const char *name, uint64_t min, uint64_t max,
                                  bool *given, uint64_t *value)
{
    span_t text;
    *given = parse_query_param(query, name, &text);
    if (!*given)
        return true;
    if (parse_uint(text, max, value) == 0 && *value >= min)
        return true;
    char detail[96];
    snprintf(detail, sizeof detail, "%s must be a whole number from %llu to %llu", name, (unsigned long long)min,
             (unsigned long long)max);
    reply_problem(req, 400, "invalid-parameter", detail);
    return false;
}

/* `after`: with one shard the decimal position (as ever); with more, only a page's `next` token (an
 * entry's cursor "S.P" names one shard, and a page needs every shard's position). */
static bool after_or_reply(app_t *app, http_request_t *req, span_t query, changes_query_t *q)
{
    if (app->nshards == 1)
        return number_param_or_reply(req, query, "after", 0, SHARD_POSITION_MAX, &q->has_after, &q->pos[0]);
    span_t text;
    q->has_after = parse_query_param(query, "after", &text);
    if (!q->has_after || shard_token_parse(text, (uint32_t)app->nshards, q->pos) == 0)
        return true;
    reply_problem(req, 400, "invalid-parameter",
                  "after must be a page's next (an entry's cursor names one shard's position only)");
    return false;
}

void changes_get(app_t *app, http_request_t *req, span_t query)
{
    bool has_limit, has_wait;
    uint64_t limit = CHANGES_LIMIT_DEFAULT, wait_s = 0;
    changes_query_t *q = calloc(1, sizeof *q);
    if (!q) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    q->app = app;
    atomic_init(&q->refs, 1);
    if (!auth_admin_or_reply(app, req) || !after_or_reply(app, req, query, q) ||
        !number_param_or_reply(req, query, "limit", 1, CHANGES_LIMIT_MAX, &has_limit, &limit) ||
        !number_param_or_reply(req, query, "wait", 0, CHANGES_WAIT_MAX_S, &has_wait, &wait_s)) {
        free(q);
        return;
    }
    q->limit = (size_t)limit;
    q->wait_ms = wait_s * 1000;
    if (app->readers) {
        app_read_submit(app, req, &q->job, changes_job, &q->pending, q);
        return;
    }
    int n = changes_page(q);
    if (n != 0 || wait_s == 0) {
        http_respond(req, &q->answer);
        query_unref(q);
        return;
    }
    q->pending = http_defer(req);
    if (!q->pending) {
        http_respond(req, &q->answer);
        query_unref(q);
        return;
    }
    changes_first_done(q, n);
}
