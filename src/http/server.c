/* server.c — the h2o adapter: event loops on HTTP threads sharing one listening socket, the
 * request view of request.h, and deferred answers delivered through h2o's multithread queues.
 * This is the only file that includes h2o. */
#include "http/server.h"

#include <arpa/inet.h>
#include <h2o.h>
#include <h2o/multithread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#define MAX_THREADS 64

typedef struct http_thread http_thread_t;

struct http_pending {
    h2o_multithread_message_t message; /* first: the queue hands back this link */
    h2o_req_t *req;                    /* NULL once h2o disposed of the request (client gone) */
    struct pending_guard *guard;
    http_thread_t *thread;
    const answer_t *answer;
    void (*release)(void *);
    void *release_arg;
};

/* Lives in the request's memory pool; h2o calls its dispose when the request goes away. */
struct pending_guard {
    http_pending_t *pending;
};

typedef enum { CONTROL_STOP_ACCEPTING, CONTROL_EXIT } control_t;

typedef struct {
    h2o_multithread_message_t message;
    control_t what;
} control_msg_t;

struct http_thread {
    pthread_t tid;
    h2o_evloop_t *loop;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t answers, control;
    bool exit;
};

static struct {
    http_server_config_t cfg;
    h2o_globalconf_t config;
    http_thread_t threads[MAX_THREADS];
    int nthreads;
    atomic_size_t pending;
    atomic_size_t connections;
    atomic_uint_fast64_t refused;
    h2o_barrier_t started;
} server;

static _Thread_local http_thread_t *current_thread;

/* --- the request view --- */

static h2o_req_t *h2o_req(const http_request_t *req)
{
    return (h2o_req_t *)req;
}

span_t http_req_method(const http_request_t *req)
{
    return (span_t){h2o_req(req)->input.method.base, h2o_req(req)->input.method.len};
}

span_t http_req_target(const http_request_t *req)
{
    return (span_t){h2o_req(req)->input.path.base, h2o_req(req)->input.path.len};
}

span_t http_req_body(const http_request_t *req)
{
    h2o_iovec_t e = h2o_req(req)->entity;
    return (span_t){e.base ? e.base : "", e.base ? e.len : 0};
}

size_t http_req_header(const http_request_t *req, const char *name, span_t *first)
{
    const h2o_headers_t *headers = &h2o_req(req)->headers;
    size_t name_len = strlen(name), count = 0;
    for (size_t i = 0; i < headers->size; i++) {
        const h2o_header_t *h = &headers->entries[i];
        if (h->name->len == name_len && h2o_lcstris(h->name->base, h->name->len, name, name_len)) {
            if (count++ == 0 && first)
                *first = (span_t){h->value.base, h->value.len};
        }
    }
    return count;
}

size_t http_req_header_bytes(const http_request_t *req)
{
    const h2o_headers_t *headers = &h2o_req(req)->headers;
    size_t n = 0;
    for (size_t i = 0; i < headers->size; i++)
        n += headers->entries[i].name->len + headers->entries[i].value.len;
    return n;
}

uint64_t http_req_age_us(const http_request_t *req)
{
    struct timeval now, begin = h2o_req(req)->timestamps.request_begin_at;
    gettimeofday(&now, NULL);
    int64_t us = (int64_t)(now.tv_sec - begin.tv_sec) * 1000000 + (now.tv_usec - begin.tv_usec);
    return us > 0 ? (uint64_t)us : 0;
}

static const char *content_type_of(answer_type_t type)
{
    switch (type) {
    case ANSWER_JSON:
        return "application/json";
    case ANSWER_PROBLEM:
        return "application/problem+json";
    case ANSWER_TEXT:
        return "text/plain; version=0.0.4; charset=utf-8";
    }
    return "application/octet-stream";
}

static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Unknown";
    }
}

static void add_header_str(h2o_req_t *req, const char *name, const char *value)
{
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 1, NULL, value, strlen(value));
}

void http_add_header(http_request_t *request, const char *name, const char *value)
{
    h2o_req_t *req = h2o_req(request);
    h2o_iovec_t v = h2o_strdup(&req->pool, value, SIZE_MAX);
    h2o_iovec_t n = h2o_strdup(&req->pool, name, SIZE_MAX);
    h2o_add_header_by_str(&req->pool, &req->res.headers, n.base, n.len, 1, NULL, v.base, v.len);
}

size_t http_req_peer(const http_request_t *request, char *buf, size_t len)
{
    h2o_req_t *req = h2o_req(request);
    struct sockaddr_storage ss;
    socklen_t sl = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (sl == 0 || len < INET6_ADDRSTRLEN)
        return 0;
    const void *addr = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                                : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    if ((ss.ss_family != AF_INET && ss.ss_family != AF_INET6) || !inet_ntop(ss.ss_family, addr, buf, (socklen_t)len))
        return 0;
    return strlen(buf);
}

void http_respond(http_request_t *request, const answer_t *a)
{
    h2o_req_t *req = h2o_req(request);
    char buf[32];
    req->res.status = a->status;
    req->res.reason = reason_of(a->status);
    add_header_str(req, "content-type", content_type_of(a->type));
    if (a->has_etag) {
        snprintf(buf, sizeof buf, "\"%llu\"", (unsigned long long)a->etag_version);
        h2o_iovec_t v = h2o_strdup(&req->pool, buf, SIZE_MAX);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ETAG, NULL, v.base, v.len);
    }
    if (a->replayed)
        add_header_str(req, "idempotent-replayed", "true");
    if (a->retry_after_s) {
        snprintf(buf, sizeof buf, "%u", a->retry_after_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, buf, SIZE_MAX);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
    }
    if (a->allow)
        add_header_str(req, "allow", a->allow);
    if (a->www_authenticate)
        add_header_str(req, "www-authenticate", "Bearer");
    req->res.content_length = a->body_len;
    if (server.cfg.on_respond)
        server.cfg.on_respond(server.cfg.app, request, a->status, a->body_len);
    h2o_send_inline(req, a->body ? a->body : "", a->body_len);
}

/* --- deferred answers --- */

static void pending_guard_dispose(void *p)
{
    struct pending_guard *guard = p;
    if (guard->pending)
        guard->pending->req = NULL;
}

http_pending_t *http_defer(http_request_t *request)
{
    h2o_req_t *req = h2o_req(request);
    http_pending_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    /* Linked to the request's pool: disposed (and the pending told) when the request goes away. */
    p->guard = h2o_mem_alloc_shared(&req->pool, sizeof *p->guard, pending_guard_dispose);
    p->guard->pending = p;
    p->req = req;
    p->thread = current_thread;
    atomic_fetch_add(&server.pending, 1);
    return p;
}

void http_pending_cancel(http_pending_t *p)
{
    p->guard->pending = NULL;
    free(p);
    atomic_fetch_sub(&server.pending, 1);
}

void http_pending_respond(http_pending_t *p, const answer_t *a, void (*release)(void *), void *arg)
{
    p->answer = a;
    p->release = release;
    p->release_arg = arg;
    h2o_multithread_send_message(&p->thread->answers, &p->message);
}

static void on_answers(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        http_pending_t *p = H2O_STRUCT_FROM_MEMBER(http_pending_t, message.link, messages->next);
        h2o_linklist_unlink(&p->message.link);
        if (p->req) {
            p->guard->pending = NULL;
            http_respond((http_request_t *)p->req, p->answer);
        }
        p->release(p->release_arg);
        free(p);
        atomic_fetch_sub(&server.pending, 1);
    }
}

/* --- threads and the listening socket --- */

static void on_control(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    http_thread_t *t = H2O_STRUCT_FROM_MEMBER(http_thread_t, control, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        control_msg_t *m = H2O_STRUCT_FROM_MEMBER(control_msg_t, message.link, messages->next);
        h2o_linklist_unlink(&m->message.link);
        if (m->what == CONTROL_STOP_ACCEPTING && t->listener)
            h2o_socket_read_stop(t->listener);
        else if (m->what == CONTROL_EXIT)
            t->exit = true;
        free(m);
    }
}

static void on_connection_closed(void *data)
{
    (void)data;
    atomic_fetch_sub(&server.connections, 1);
}

static const char overloaded_response[] = "HTTP/1.1 503 Service Unavailable\r\n"
                                          "Content-Type: application/problem+json\r\n"
                                          "Retry-After: 1\r\nConnection: close\r\nContent-Length: 110\r\n\r\n"
                                          "{\"type\":\"urn:tally:error:overloaded\",\"title\":\"Server overloaded\","
                                          "\"status\":503,\"detail\":\"too many connections\"}";

static void on_refusal_written(h2o_socket_t *sock, const char *err)
{
    (void)err;
    h2o_socket_close(sock);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    http_thread_t *t = listener->data;
    if (err != NULL)
        return;
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (sock == NULL)
        return;
    if (atomic_load(&server.connections) >= server.cfg.max_connections) {
        atomic_fetch_add(&server.refused, 1);
        h2o_iovec_t buf = h2o_iovec_init(overloaded_response, sizeof overloaded_response - 1);
        h2o_socket_write(sock, &buf, 1, on_refusal_written);
        return;
    }
    atomic_fetch_add(&server.connections, 1);
    sock->on_close.cb = on_connection_closed;
    sock->on_close.data = t;
    h2o_accept(&t->accept_ctx, sock);
}

size_t http_server_connections(void)
{
    return atomic_load(&server.connections);
}

uint64_t http_server_refused(void)
{
    return atomic_load(&server.refused);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    server.cfg.handler(server.cfg.app, (http_request_t *)req);
    return 0;
}

static void *thread_main(void *arg)
{
    http_thread_t *t = arg;
    current_thread = t;
    t->loop = h2o_evloop_create();
    h2o_context_init(&t->ctx, t->loop, &server.config);
    t->accept_ctx.ctx = &t->ctx;
    t->accept_ctx.hosts = server.config.hosts;
    t->queue = h2o_multithread_create_queue(t->loop);
    h2o_multithread_register_receiver(t->queue, &t->answers, on_answers);
    h2o_multithread_register_receiver(t->queue, &t->control, on_control);
    t->listener = h2o_evloop_socket_create(t->loop, server.cfg.listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    t->listener->data = t;
    h2o_socket_read_start(t->listener, on_accept);
    h2o_barrier_wait(&server.started);
    while (!t->exit)
        h2o_evloop_run(t->loop, INT32_MAX);
    return NULL;
}

int http_server_start(const http_server_config_t *cfg)
{
    server.cfg = *cfg;
    server.nthreads = cfg->threads < 1 ? 1 : cfg->threads > MAX_THREADS ? MAX_THREADS : cfg->threads;
    h2o_config_init(&server.config);
    server.config.server_name = h2o_iovec_init(H2O_STRLIT("tally"));
    server.config.max_request_entity_size = cfg->max_body_bytes;
    server.config.http1.upgrade_to_http2 = 0;
    server.config.http1.req_timeout = cfg->request_timeout_ms;
    h2o_hostconf_t *host = h2o_config_register_host(&server.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof *handler);
    handler->on_req = on_req;
    h2o_barrier_init(&server.started, (size_t)server.nthreads + 1);
    for (int i = 0; i < server.nthreads; i++)
        h2o_multithread_create_thread(&server.threads[i].tid, NULL, thread_main, &server.threads[i]);
    h2o_barrier_wait(&server.started);
    return 0;
}

static void send_control(control_t what)
{
    for (int i = 0; i < server.nthreads; i++) {
        control_msg_t *m = calloc(1, sizeof *m);
        if (!m)
            abort();
        m->what = what;
        h2o_multithread_send_message(&server.threads[i].control, &m->message);
    }
}

void http_server_stop_accepting(void)
{
    send_control(CONTROL_STOP_ACCEPTING);
}

size_t http_server_drain(uint64_t timeout_ms)
{
    const struct timespec tick = {0, 5 * 1000 * 1000};
    for (uint64_t waited = 0; atomic_load(&server.pending) > 0 && waited < timeout_ms; waited += 5)
        nanosleep(&tick, NULL);
    return atomic_load(&server.pending);
}

void http_server_stop(void)
{
    send_control(CONTROL_EXIT);
    for (int i = 0; i < server.nthreads; i++)
        pthread_join(server.threads[i].tid, NULL);
}
