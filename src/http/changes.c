/* changes.c — GET /v1/changes: every transition in commit order, paged by cursor, with long
 * polling through the feed thread (no snapshot is held while a poll waits). */
#include <stdio.h>
#include <stdlib.h>

#include "core/changejson.h"
#include "core/parse.h"
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
    uint64_t after;
    size_t limit;
    uint64_t next; /* the page's `next` cursor */
    http_pending_t *pending;
    answer_t answer;
} changes_query_t;

typedef struct {
    const kinds_t *kinds;
    textbuf_t text; /* {"changes":[ and the entries so far */
    uint64_t last;
    int n;
} page_t;

static int page_add(void *arg, uint64_t seq, const transition_t *t)
{
    page_t *p = arg;
    if (p->n++)
        textbuf_lit(&p->text, ",");
    changejson_append(&p->text, p->kinds, seq, t);
    p->last = seq;
    return p->text.failed;
}

/* Reads one page with a fresh snapshot into q->answer, and its last cursor into q->next. Returns the
 * number of changes, or -1 when the answer is an error. */
static int changes_page(changes_query_t *q)
{
    store_read_t *snap;
    uint64_t oldest = 0, newest = 0;
    if (store_read_begin(q->app->store, &snap) != STORE_OK) {
        answer_problem(&q->answer, 503, "unavailable", "the store cannot be read");
        return -1;
    }
    int rc = store_read_log_window(snap, &oldest, &newest);
    uint64_t after = q->has_after ? q->after : oldest - 1;
    if (rc == STORE_OK && after + 1 < oldest) {
        store_read_end(snap);
        answer_problem(&q->answer, 410, "cursor-expired", "the log no longer holds the changes after that cursor");
        return -1;
    }
    if (rc == STORE_OK && after > newest) {
        store_read_end(snap);
        answer_problem(&q->answer, 400, "invalid-parameter", "after is not a cursor this server gave");
        return -1;
    }
    page_t p = {.kinds = q->app->kinds, .last = after};
    textbuf_lit(&p.text, "{\"changes\":[");
    if (rc == STORE_OK)
        rc = store_read_log(snap, after, q->limit, page_add, &p);
    store_read_end(snap);
    q->next = p.last;
    textbuf_lit(&p.text, "],\"next\":\"");
    textbuf_uint(&p.text, p.last);
    if (p.kinds->mode == REACTION_MODE_MANY)
        textbuf_lit(&p.text, "\",\"mode\":\"many\"}");
    else
        textbuf_lit(&p.text, "\",\"mode\":\"one\"}");
    size_t len = 0;
    char *body = textbuf_finish(&p.text, &len);
    if (rc != STORE_OK || !body) {
        free(body);
        answer_problem(&q->answer, 500, "internal", "reading the change feed failed");
        return -1;
    }
    answer_set_body(&q->answer, 200, ANSWER_JSON, body, len);
    return p.n;
}

static void query_free(void *arg)
{
    changes_query_t *q = arg;
    answer_free(&q->answer);
    free(q);
}

/* Feed thread: new changes, the wait ran out, or shutdown. */
static void changes_wake(void *arg)
{
    changes_query_t *q = arg;
    changes_page(q);
    http_pending_respond(q->pending, &q->answer, query_free, q);
}

/* After the first page: nothing yet and a wait asked for → wait on the feed thread from where the
 * empty page ended (q->pending is deferred); else answer. Any thread. */
static void changes_first_done(changes_query_t *q, int n)
{
    if (n != 0 || q->wait_ms == 0) {
        http_pending_respond(q->pending, &q->answer, query_free, q);
        return;
    }
    q->has_after = true;
    q->after = q->next;
    if (feed_wait(q->app->feed, q->after, q->wait_ms, changes_wake, q) != 0)
        http_pending_respond(q->pending, &q->answer, query_free, q); /* shutting down: the empty page at once */
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
    if (!auth_admin_or_reply(app, req) ||
        !number_param_or_reply(req, query, "after", 0, UINT64_MAX - 1, &q->has_after, &q->after) ||
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
        query_free(q);
        return;
    }
    q->pending = http_defer(req);
    if (!q->pending) {
        http_respond(req, &q->answer);
        query_free(q);
        return;
    }
    changes_first_done(q, n);
}
