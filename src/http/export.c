/* export.c — the export routes (export.h). An export is a thread of its own (a store's read may wait
 * on a server, and a snapshot is used by one thread at a time) that renders a page, hands it to the
 * request's HTTP thread in a message, and renders the next only once the client has taken the one
 * before (the stream's drain). The thread lets go of its snapshot when the export is whole, when the
 * client leaves, at --export-timeout, and at shutdown; an export that did not end whole is cut:
 * its answer ends without the closing line and without HTTP's own end of body, so that neither
 * import nor an HTTP client mistakes it for a whole one. */
#include "http/export.h"
#include "http/auth.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/ids.h"
#include "core/log.h"
#include "engine/export.h"

#define EXPORT_END_TICK_MS 10

typedef struct job job_t;
struct job {
    app_t *app;
    int thread; /* the request's HTTP thread */
    export_kind_t kind;
    char user[ID_MAX_LEN], who[ID_MAX_LEN];
    size_t user_len, who_len;
    uint64_t started_ms, deadline_ms;
    atomic_int refs; /* the export thread's, the HTTP side's (request or stream), one per message */
    /* The HTTP thread's own. */
    http_pending_t *pending; /* until the first page's message: then the stream */
    http_stream_t *stream;   /* NULL before the first page and once the stream is over */
    bool in_flight;          /* a page written, its drain not seen yet */
    bool cut_due;            /* drop the stream once the page in flight is sent */
    /* Shared, under lock. */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on the monotonic clock */
    bool want;           /* the HTTP thread takes the next page */
    bool stop;           /* the stream is over, or shutdown: the export thread ends */
    job_t *prev, *next;  /* the running exports (exports.lock) */
};

/* A page on its way to the HTTP thread. */
typedef struct {
    job_t *job;
    textbuf_t page;
    int rc; /* what export_next said of it: EXPORT_MORE, _DONE, _CUT, or a STORE_* error */
} page_msg_t;

static struct {
    export_http_options_t opt;
    pthread_mutex_t lock;
    job_t *running; /* every export whose thread has not ended */
    size_t count;
    bool closing;
    atomic_uint_fast64_t started, completed, cut, refused, failed, lines;
} exports = {.lock = PTHREAD_MUTEX_INITIALIZER};

void export_http_setup(const export_http_options_t *opt)
{
    exports.opt = *opt;
}

static void job_unref(job_t *j)
{
    if (atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
    free(j);
}

static void job_stop(job_t *j)
{
    pthread_mutex_lock(&j->lock);
    j->stop = true;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
}

static void job_want(job_t *j)
{
    pthread_mutex_lock(&j->lock);
    j->want = true;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
}

/* --- the HTTP thread's side --- */

/* The stream is over (sent whole, dropped, or the client left). */
static void on_stream_end(void *arg)
{
    job_t *j = arg;
    j->stream = NULL;
    job_stop(j);
    job_unref(j); /* the HTTP side's */
}

/* All that was written has been handed to the connection: the next page may come. */
static void on_drain(void *arg)
{
    job_t *j = arg;
    j->in_flight = false;
    if (j->cut_due)
        http_stream_drop(j->stream); /* on_stream_end follows */
    else
        job_want(j);
}

/* The first page: the deferred request becomes the stream, or is answered with the problem that kept
 * the export from starting (nothing was sent yet, so the client gets a status that says so). False
 * when there is no stream to write to. */
static bool stream_start(job_t *j, int rc)
{
    http_request_t *req = http_pending_take(j->pending);
    j->pending = NULL;
    if (req && (rc == EXPORT_MORE || rc == EXPORT_DONE)) {
        j->stream =
            http_stream_open_paced(req, "application/x-ndjson", EXPORT_STREAM_MAX_UNSENT, on_stream_end, on_drain, j);
        if (j->stream)
            return true;
        reply_problem(req, 503, "overloaded", "out of memory");
    } else if (req) {
        bool unavailable = rc == STORE_UNAVAILABLE || rc == EXPORT_CUT;
        reply_problem(req, unavailable ? 503 : 500, unavailable ? "unavailable" : "internal",
                      rc == EXPORT_CUT ? "the export was cut before its first page (--export-timeout, or the "
                                         "server is stopping)"
                                       : "the store cannot be read");
    }
    job_stop(j);
    job_unref(j); /* the HTTP side's: no stream will end */
    return false;
}

static void on_page(void *arg)
{
    page_msg_t *m = arg;
    job_t *j = m->job;
    if (j->pending && !stream_start(j, m->rc))
        goto done;
    if (!j->stream)
        goto done; /* over already: the client left */
    if (m->rc == EXPORT_MORE || m->rc == EXPORT_DONE) {
        if (m->page.len) {
            j->in_flight = true;
            if (http_stream_write(j->stream, m->page.buf, m->page.len) != 0)
                goto done; /* dropped: on_stream_end follows, or ran */
        } else if (m->rc == EXPORT_MORE) {
            job_want(j); /* a page of rows of none only: nothing to wait for */
        }
        if (m->rc == EXPORT_DONE && j->stream)
            http_stream_end(j->stream);
    } else if (j->in_flight) {
        j->cut_due = true;
    } else {
        http_stream_drop(j->stream);
    }
done:
    free(m->page.buf);
    free(m);
    job_unref(j);
}

/* --- the export thread's side --- */

/* Hands the page in work over (taking its buffer) once the HTTP thread wants one; at the deadline
 * the snapshot goes and a cut is handed over instead, wanted or not. Returns whether the export goes
 * on; false when it is over (the last page handed, or the stream is over). */
static bool hand_over(job_t *j, export_t *x, int rc, textbuf_t *work, int *outcome)
{
    pthread_mutex_lock(&j->lock);
    while (!j->want && !j->stop) {
        if (x && mono_ms() >= j->deadline_ms) {
            export_release(x);
            rc = EXPORT_CUT;
            work->len = 0;
            break;
        }
        struct timespec until = {(time_t)(j->deadline_ms / 1000), (long)(j->deadline_ms % 1000) * 1000000L};
        pthread_cond_timedwait(&j->cond, &j->lock, &until);
    }
    bool stopped = j->stop;
    if (!stopped)
        j->want = false;
    pthread_mutex_unlock(&j->lock);
    *outcome = stopped ? EXPORT_CUT : rc;
    /* stopped: a cut goes all the same; the HTTP thread drops the stream at shutdown, and does
     * nothing when the stream is over already (the client left) */
    page_msg_t *m = malloc(sizeof *m);
    if (!m) {
        *outcome = STORE_ERROR;
        return false; /* the stream ends at shutdown's drop, or its client's leaving */
    }
    *m = (page_msg_t){.job = j, .page = *work, .rc = stopped ? EXPORT_CUT : rc};
    *work = (textbuf_t){0};
    atomic_fetch_add(&j->refs, 1);
    if (http_thread_post(j->thread, on_page, m) != 0) {
        free(m->page.buf);
        free(m);
        atomic_fetch_sub(&j->refs, 1);
        *outcome = STORE_ERROR;
        return false;
    }
    return !stopped && rc == EXPORT_MORE;
}

static void job_log(job_t *j, int outcome, uint64_t lines)
{
    const char *what = outcome == EXPORT_DONE ? "complete" : outcome == EXPORT_CUT ? "cut" : "failed";
    if (outcome == EXPORT_DONE)
        atomic_fetch_add(&exports.completed, 1);
    else if (outcome == EXPORT_CUT)
        atomic_fetch_add(&exports.cut, 1);
    else
        atomic_fetch_add(&exports.failed, 1);
    atomic_fetch_add(&exports.lines, lines);
    log_line("level=info event=export kind=%s outcome=%s lines=%llu ms=%llu who=\"%.*s\"",
             j->kind == EXPORT_ALL ? "admin" : "user", what, (unsigned long long)lines,
             (unsigned long long)(mono_ms() - j->started_ms), (int)j->who_len, j->who);
}

static uint32_t export_shard_of(void *arg, span_t item)
{
    return app_item_shard(arg, item)->k;
}

static void *export_thread(void *arg)
{
    job_t *j = arg;
    pthread_setname_np(pthread_self(), "tally-export");
    export_t *x = NULL;
    textbuf_t work = {0};
    int outcome;
    app_t *app = j->app;
    store_t *stores[SHARD_MAX];
    for (size_t k = 0; k < app->nshards; k++)
        stores[k] = app->shard[k].store;
    export_stores_t from = {stores, app->nshards, export_shard_of, app};
    int rc = export_open(&from, j->kind, (span_t){j->user, j->user_len}, j->deadline_ms, &x);
    if (rc != STORE_OK) {
        x = NULL;
        hand_over(j, NULL, rc, &work, &outcome);
    } else {
        do {
            work.len = 0;
            work.failed = false;
            rc = export_next(x, &work);
        } while (hand_over(j, x, rc, &work, &outcome));
    }
    free(work.buf);
    uint64_t lines = x ? export_lines(x) : 0;
    export_close(x); /* the snapshot goes before the slot */
    job_log(j, outcome, lines);
    pthread_mutex_lock(&exports.lock);
    if (j->prev)
        j->prev->next = j->next;
    else
        exports.running = j->next;
    if (j->next)
        j->next->prev = j->prev;
    exports.count--;
    pthread_mutex_unlock(&exports.lock);
    job_unref(j); /* the thread's */
    return NULL;
}

/* Takes a slot and starts the export thread; on any failure answers req. */
static void job_start(app_t *app, http_request_t *req, export_kind_t kind, span_t user, span_t who)
{
    job_t *j = calloc(1, sizeof *j);
    pthread_condattr_t cattr;
    if (!j) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    j->app = app;
    j->thread = http_thread_index();
    j->kind = kind;
    if (user.len) /* the admin export has none */
        memcpy(j->user, user.ptr, user.len);
    j->user_len = user.len;
    j->who_len = who.len < sizeof j->who ? who.len : sizeof j->who;
    if (j->who_len)
        memcpy(j->who, who.ptr, j->who_len);
    j->started_ms = mono_ms();
    j->deadline_ms = j->started_ms + exports.opt.timeout_ms;
    j->want = true; /* the first page goes as soon as it is read */
    atomic_init(&j->refs, 2);
    pthread_mutex_init(&j->lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cond, &cattr);
    pthread_condattr_destroy(&cattr);

    pthread_mutex_lock(&exports.lock);
    bool closing = exports.closing, full = exports.count >= exports.opt.max_exports;
    bool head = span_eq_str(http_req_method(req), "HEAD"); /* what its GET would answer, no slot taken */
    if (!closing && !full && !head) {
        j->next = exports.running;
        if (j->next)
            j->next->prev = j;
        exports.running = j;
        exports.count++;
    }
    pthread_mutex_unlock(&exports.lock);
    if (closing || full || head) {
        pthread_mutex_destroy(&j->lock);
        pthread_cond_destroy(&j->cond);
        free(j);
        if (head && !closing && !full) {
            http_stream_head(req, "application/x-ndjson");
        } else if (full) {
            if (!head)
                atomic_fetch_add(&exports.refused, 1);
            reply_problem_with(req, 503, "overloaded", "too many exports are running (--max-exports); retry later",
                               (problem_headers_t){.retry_after_s = exports.opt.retry_after_s});
        } else {
            reply_problem(req, 503, "unavailable", "the server is stopping");
        }
        return;
    }
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    j->pending = http_defer(req);
    int started = j->pending ? pthread_create(&tid, &attr, export_thread, j) : -1;
    pthread_attr_destroy(&attr);
    if (started == 0) {
        atomic_fetch_add(&exports.started, 1);
        return;
    }
    if (j->pending)
        http_pending_cancel(j->pending);
    pthread_mutex_lock(&exports.lock);
    if (j->prev)
        j->prev->next = j->next;
    else
        exports.running = j->next;
    if (j->next)
        j->next->prev = j->prev;
    exports.count--;
    pthread_mutex_unlock(&exports.lock);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
    free(j);
    reply_problem(req, 503, "overloaded", "cannot start the export");
}

void export_http_user(app_t *app, http_request_t *req, span_t user)
{
    if (!id_valid(user)) {
        reply_problem(req, 400, "invalid-user-id", "ids are 1-128 bytes of A-Z a-z 0-9 . _ : ~ - (and not . or ..)");
        return;
    }
    auth_t who;
    if (!auth_user_or_reply(app, req, true, &who))
        return;
    /* whatever --user-reactions says: an export is everything the user did, for them and admins */
    if (!who.admin && !span_eq(who.user, user)) {
        reply_problem(req, 403, "forbidden", "a user's export is given to that user and to admins");
        return;
    }
    job_start(app, req, EXPORT_USER, user, who.user);
}

void export_http_admin(app_t *app, http_request_t *req)
{
    auth_t who;
    if (!auth_user_or_reply(app, req, true, &who))
        return;
    if (!who.admin) {
        reply_problem(req, 403, "forbidden", "this needs admin rights");
        return;
    }
    job_start(app, req, EXPORT_ALL, (span_t){0}, who.user);
}

size_t export_http_end_all(uint64_t timeout_ms)
{
    pthread_mutex_lock(&exports.lock);
    exports.closing = true;
    for (job_t *j = exports.running; j; j = j->next)
        job_stop(j);
    pthread_mutex_unlock(&exports.lock);
    const struct timespec tick = {0, EXPORT_END_TICK_MS * 1000000L};
    for (uint64_t waited = 0;; waited += EXPORT_END_TICK_MS) {
        pthread_mutex_lock(&exports.lock);
        size_t left = exports.count;
        pthread_mutex_unlock(&exports.lock);
        if (left == 0 || waited >= timeout_ms)
            return left;
        nanosleep(&tick, NULL);
    }
}

void export_http_stats(export_http_stats_t *out)
{
    pthread_mutex_lock(&exports.lock);
    out->running = exports.count;
    pthread_mutex_unlock(&exports.lock);
    out->started = atomic_load(&exports.started);
    out->completed = atomic_load(&exports.completed);
    out->cut = atomic_load(&exports.cut);
    out->refused = atomic_load(&exports.refused);
    out->failed = atomic_load(&exports.failed);
    out->lines = atomic_load(&exports.lines);
}
