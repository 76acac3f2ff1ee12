/* server_answers.c — the h2o adapter's answers that come from other threads: deferred answers (the
 * writer's, a reader thread's), held and handed over one message per HTTP thread; streaming answers
 * (server-sent events) written from any thread; and calls posted to an HTTP thread. Shares the
 * adapter's state (server_core.c) with server.c through http/server_core.h. */
#include "http/server_core.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- deferred answers --- */

static void pending_guard_dispose(void *p)
{
    struct pending_guard *guard = p;
    if (guard->pending)
        guard->pending->req = NULL;
}

http_pending_t *http_defer(http_request_t *request)
{
    h2o_req_t *req = http_h2o_req(request);
    HTTP_ON_REQUEST_THREAD(req);
    http_pending_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    /* Linked to the request's pool: disposed (and the pending told) when the request goes away. */
    p->guard = h2o_mem_alloc_shared(&req->pool, sizeof *p->guard, pending_guard_dispose);
    p->guard->pending = p;
    p->req = req;
    p->thread = http_current;
    atomic_fetch_add(&http_srv.pending, 1);
    return p;
}

void http_pending_cancel(http_pending_t *p)
{
    p->guard->pending = NULL;
    free(p);
    atomic_fetch_sub(&http_srv.pending, 1);
}

http_request_t *http_pending_take(http_pending_t *p)
{
    h2o_req_t *req = p->req;
    if (req)
        p->guard->pending = NULL;
    free(p);
    atomic_fetch_sub(&http_srv.pending, 1);
    return (http_request_t *)req;
}

/* The answers a thread holds back between http_answers_hold and http_answers_flush, per HTTP thread:
 * each thread's are chained (bundled) behind the first, whose message carries them all. */
static _Thread_local struct {
    bool holding;
    http_pending_t *first[MAX_THREADS], *last[MAX_THREADS];
} held;

void http_answers_hold(void)
{
    held.holding = true;
}

void http_answers_flush(void)
{
    held.holding = false;
    for (int i = 0; i < http_srv.nthreads; i++) {
        http_pending_t *p = held.first[i];
        if (!p)
            continue;
        held.first[i] = held.last[i] = NULL;
        h2o_multithread_send_message(&p->thread->answers, &p->message);
    }
}

void http_pending_respond(http_pending_t *p, const answer_t *a, void (*release)(void *), void *arg)
{
    p->answer = a;
    p->release = release;
    p->release_arg = arg;
    p->bundled = NULL;
    if (held.holding) {
        int i = p->thread->index;
        if (held.last[i])
            held.last[i]->bundled = p;
        else
            held.first[i] = p;
        held.last[i] = p;
        return;
    }
    h2o_multithread_send_message(&p->thread->answers, &p->message);
}

static void answer_one(http_pending_t *p)
{
    if (p->req) {
        p->guard->pending = NULL;
        http_respond((http_request_t *)p->req, p->answer);
    }
    p->release(p->release_arg);
    free(p);
    atomic_fetch_sub(&http_srv.pending, 1);
}

void http_on_answers(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        http_pending_t *p = H2O_STRUCT_FROM_MEMBER(http_pending_t, message.link, messages->next);
        h2o_linklist_unlink(&p->message.link);
        while (p) {
            http_pending_t *next = p->bundled; /* answer_one frees p */
            answer_one(p);
            p = next;
        }
    }
}

/* --- streaming answers --- */

#define STREAM_SNDBUF_BYTES (32 << 10)
#define STREAM_PACED_SNDBUF_BYTES (256 << 10)
#define STREAM_USER_TIMEOUT_MS 60000

struct http_stream {
    h2o_generator_t generator; /* first: h2o hands back this pointer */
    h2o_req_t *req;            /* NULL once h2o disposed of the request */
    char *sending;             /* handed to h2o_send; kept until proceed says it is sent */
    char *buf;                 /* written, not handed to h2o yet */
    size_t len, cap, sending_len, max_unsent;
    uint64_t taken;    /* bytes the connection took (each write handed to h2o, once it was sent) */
    bool ending;       /* end once buf is sent */
    bool finished;     /* the final h2o_send is made, or the stream dropped: nothing more goes out */
    bool abort_due;    /* dropped while a write was in flight: abort the answer once it is done */
    bool in_call;      /* inside one of our calls into h2o: a dispose then frees later */
    bool disposed;     /* h2o disposed of the request while in_call */
    conn_slot_t *slot; /* its connection's, until one of the two goes */
    void (*on_end)(void *arg);
    void (*on_drain)(void *arg); /* NULL: the writer writes when it likes */
    void *arg;
};

/* Lives in the request's pool: its dispose says the request (and the stream) is over. */
struct stream_guard {
    http_stream_t *stream;
};

static void stream_free(http_stream_t *s)
{
    if (s->slot)
        s->slot->stream = NULL;
    void (*on_end)(void *) = s->on_end;
    void *arg = s->arg;
    free(s->sending);
    free(s->buf);
    free(s);
    on_end(arg);
}

void http_stream_unslot(conn_slot_t *slot)
{
    if (slot->stream)
        slot->stream->slot = NULL;
}

static void stream_guard_dispose(void *p)
{
    http_stream_t *s = ((struct stream_guard *)p)->stream;
    s->req = NULL;
    if (s->in_call)
        s->disposed = true;
    else
        stream_free(s);
}

/* Hands buf to h2o (when nothing is in flight), or the final empty chunk once all is sent. */
static void stream_push(http_stream_t *s)
{
    if (!s->req || s->finished || s->sending)
        return;
    s->in_call = true;
    if (s->len) {
        s->sending = s->buf;
        s->sending_len = s->len;
        s->buf = NULL;
        s->len = s->cap = 0;
        h2o_iovec_t v = h2o_iovec_init(s->sending, s->sending_len);
        h2o_send(s->req, &v, 1, H2O_SEND_STATE_IN_PROGRESS);
    } else if (s->ending) {
        s->finished = true;
        h2o_send(s->req, NULL, 0, H2O_SEND_STATE_FINAL);
    }
    s->in_call = false;
    if (s->disposed)
        stream_free(s);
}

/* Aborts the answer (h2o closes the connection); s may be gone after it. */
static void stream_abort(http_stream_t *s)
{
    s->in_call = true;
    h2o_send(s->req, NULL, 0, H2O_SEND_STATE_ERROR);
    s->in_call = false;
    if (s->disposed)
        stream_free(s);
}

static void stream_proceed(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    http_stream_t *s = (http_stream_t *)g;
    s->taken += s->sending_len;
    free(s->sending);
    s->sending = NULL;
    s->sending_len = 0;
    if (s->abort_due) { /* the write went out after all: now end it */
        s->abort_due = false;
        stream_abort(s);
        return;
    }
    if (s->on_drain && !s->len && !s->ending && !s->finished && s->req) {
        s->on_drain(s->arg); /* writes (or will) the next part; s may be gone after it */
        return;
    }
    stream_push(s);
}

static void stream_stop(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    ((http_stream_t *)g)->finished = true; /* the client is gone; the pool's dispose frees */
}

/* A client that stopped reading (or left): the connection is shut down under h2o's pending write
 * (which then fails and ends the request, or completes and the answer is aborted then), or, with
 * nothing in flight, the answer is aborted at once. */
static void stream_drop(http_stream_t *s)
{
    if (s->finished || !s->req)
        return; /* already ending: h2o has the last word (a second ERROR would be a send without a generator) */
    s->finished = true;
    s->req->http1_is_persistent = 0;
    if (s->sending) { /* no send before proceed: the write fails (h2o closes), or completes and we abort */
        h2o_socket_t *sock =
            s->req->conn->callbacks->get_socket ? s->req->conn->callbacks->get_socket(s->req->conn) : NULL;
        if (sock)
            shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
        s->abort_due = true;
        return;
    }
    stream_abort(s);
}

void http_stream_drop(http_stream_t *s)
{
    stream_drop(s);
}

uint64_t http_stream_taken(const http_stream_t *s)
{
    return s->taken;
}

/* The client closed its end (or sent something: nothing may follow a stream's request): h2o does
 * not read while it answers, so the stream watches the socket itself to learn it at once. */
static void stream_on_read(h2o_socket_t *sock, const char *err)
{
    conn_slot_t *slot = sock->on_close.data;
    if (err == NULL) {
        h2o_buffer_consume(&sock->input, sock->input->size);
        return;
    }
    h2o_socket_read_stop(sock);
    if (slot && slot->stream)
        stream_drop(slot->stream);
}

/* A stream's status and headers, the same for GET and HEAD. */
static void stream_head(http_request_t *request, const char *content_type)
{
    h2o_req_t *req = http_h2o_req(request);
    req->res.status = 200;
    req->res.reason = "OK";
    req->http1_is_persistent = 0; /* nothing follows a stream on its connection */
    http_add_header_str(req, "content-type", content_type);
    http_add_header_str(req, "cache-control", "no-cache");
    http_add_header_str(req, "x-accel-buffering", "no"); /* a proxy in front must not hold the events back */
    if (http_srv.cfg.on_respond)
        http_srv.cfg.on_respond(http_srv.cfg.app, request, 200, 0);
}

static http_stream_t *stream_open(http_request_t *request, const char *content_type, size_t max_unsent,
                                  void (*on_end)(void *arg), void (*on_drain)(void *arg), void *arg)
{
    h2o_req_t *req = http_h2o_req(request);
    http_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    struct stream_guard *guard = h2o_mem_alloc_shared(&req->pool, sizeof *guard, stream_guard_dispose);
    guard->stream = s;
    s->generator = (h2o_generator_t){stream_proceed, stream_stop};
    s->req = req;
    s->max_unsent = max_unsent;
    s->on_end = on_end;
    s->on_drain = on_drain;
    s->arg = arg;
    stream_head(request, content_type);
    h2o_start_response(req, &s->generator);
    conn_slot_t *slot = http_slot_of(req);
    h2o_socket_t *sock = req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    if (slot && sock) {
        slot->stream = s;
        s->slot = slot;
        int fd = h2o_socket_get_fd(sock);
        /* A slow reader's bytes wait in our bounded buffer, not the kernel's. A paced stream writes
         * only what was taken, but a buffer as small as an event stream's would make a bulk body wait
         * on delayed ACKs (one buffer per 40 ms): it gets one that keeps the link busy, still bounded. */
        int sndbuf = on_drain ? STREAM_PACED_SNDBUF_BYTES : STREAM_SNDBUF_BYTES;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        /* a peer gone without a word (no FIN, no RST): sent bytes unacknowledged this long end it,
         * rather than TCP's retransmissions for a quarter of an hour */
        unsigned user_timeout = STREAM_USER_TIMEOUT_MS;
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
        h2o_socket_read_start(sock, stream_on_read);
    }
    return s;
}

http_stream_t *http_stream_open(http_request_t *request, const char *content_type, size_t max_unsent,
                                void (*on_end)(void *arg), void *arg)
{
    return stream_open(request, content_type, max_unsent, on_end, NULL, arg);
}

http_stream_t *http_stream_open_paced(http_request_t *request, const char *content_type, size_t max_unsent,
                                      void (*on_end)(void *arg), void (*on_drain)(void *arg), void *arg)
{
    return stream_open(request, content_type, max_unsent, on_end, on_drain, arg);
}

void http_stream_head(http_request_t *request, const char *content_type)
{
    static h2o_generator_t nothing_more = {NULL, NULL};
    h2o_req_t *req = http_h2o_req(request);
    stream_head(request, content_type);
    h2o_start_response(req, &nothing_more);
    h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
}

void http_stream_on_drain(http_stream_t *s, void (*on_drain)(void *arg))
{
    s->on_drain = on_drain;
}

int http_stream_write(http_stream_t *s, const char *p, size_t n)
{
    if (s->finished || s->ending)
        return 1;
    if (s->len + s->sending_len + n > s->max_unsent) {
        stream_drop(s);
        return -1;
    }
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->len + n)
            cap *= 2;
        char *grown = realloc(s->buf, cap);
        if (!grown) {
            stream_drop(s);
            return -1;
        }
        s->buf = grown;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    stream_push(s);
    return 0;
}

void http_stream_end(http_stream_t *s)
{
    if (s->finished || s->ending)
        return;
    s->ending = true;
    stream_push(s);
}

int http_thread_index(void)
{
    return http_current ? http_current->index : -1;
}

int http_thread_count(void)
{
    return http_srv.nthreads;
}

int http_thread_post(int i, void (*fn)(void *arg), void *arg)
{
    if (i < 0 || i >= http_srv.nthreads)
        return -1;
    call_msg_t *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->fn = fn;
    m->arg = arg;
    h2o_multithread_send_message(&http_srv.threads[i].calls, &m->message);
    return 0;
}

void http_on_calls(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        call_msg_t *m = H2O_STRUCT_FROM_MEMBER(call_msg_t, message.link, messages->next);
        h2o_linklist_unlink(&m->message.link);
        m->fn(m->arg);
        free(m);
    }
}
