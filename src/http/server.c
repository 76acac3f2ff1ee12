/* server.c — the h2o adapter: event loops on HTTP threads sharing the listening sockets (public and,
 * optionally, admin), the request view of request.h, and deferred answers delivered through h2o's
 * multithread queues. This file, server_answers.c and server_core.c (the state they share, an answer on the HTTP
 * thread) are the only ones that include h2o.
 *
 * Every accepted connection is first "peeked": its first request head is read and parsed here,
 * before h2o sees it, and the connection is then handed to one of two h2o contexts. h2o 2.2 buffers
 * a whole request body before any handler runs, and its body limit (max_request_entity_size) is per
 * context, so the choice of context is the body limit: the small one (8 KiB) for everyone, the large
 * one (--import-max-size) only for an admin's POST to a body-taking admin route, within a budget of
 * bytes in flight across all connections. A connection in the large context is closed after its
 * answer, so its reservation covers everything it may send. Answers that come from other threads
 * (deferred, streamed) and calls posted to an HTTP thread are server_answers.c's. */
#include "http/server_core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <h2o.h>
#include <h2o/multithread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "core/log.h"
#include "http/router.h"

#define ACCEPT_PAUSE_MS 100  /* out of file descriptors: stop accepting this long, then try again */
#define RESERVE_HEAD_MS 1000 /* past the cap: a health check's head must come this soon, else 503 */
#define HEAD_HEADERS_MAX H2O_MAX_HEADERS

/* picohttpparser, built into libh2o (its header is not installed by Debian's package). */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path,
                      size_t *path_len, int *minor_version, struct phr_header *headers, size_t *num_headers,
                      size_t last_len);

/* --- the request view --- */

span_t http_req_method(const http_request_t *req)
{
    return (span_t){http_h2o_req(req)->input.method.base, http_h2o_req(req)->input.method.len};
}

span_t http_req_target(const http_request_t *req)
{
    return route_origin_form((span_t){http_h2o_req(req)->input.path.base, http_h2o_req(req)->input.path.len});
}

span_t http_req_raw_target(const http_request_t *req)
{
    return (span_t){http_h2o_req(req)->input.path.base, http_h2o_req(req)->input.path.len};
}

span_t http_req_authority(const http_request_t *req)
{
    h2o_iovec_t a = http_h2o_req(req)->input.authority;
    return (span_t){a.base ? a.base : "", a.base ? a.len : 0};
}

http_listener_t http_req_listener(const http_request_t *req)
{
    conn_slot_t *slot = http_slot_of(http_h2o_req(req));
    return slot ? slot->listener : HTTP_LISTENER_PUBLIC;
}

void http_req_close_connection(http_request_t *req)
{
    http_h2o_req(req)->http1_is_persistent = 0;
}

/* Counts the framing headers of a parsed head: Content-Length (and whether its values differ) and
 * Transfer-Encoding. */
static bool framing_conflicts(const struct phr_header *headers, size_t n)
{
    size_t lengths = 0, encodings = 0;
    const struct phr_header *first_length = NULL;
    bool differ = false;
    for (size_t i = 0; i < n; i++) {
        const struct phr_header *h = &headers[i];
        if (h->name_len == 14 && h2o_lcstris(h->name, h->name_len, H2O_STRLIT("content-length"))) {
            if (lengths++ == 0)
                first_length = h;
            else if (h->value_len != first_length->value_len ||
                     memcmp(h->value, first_length->value, h->value_len) != 0)
                differ = true;
        } else if (h->name_len == 17 && h2o_lcstris(h->name, h->name_len, H2O_STRLIT("transfer-encoding"))) {
            encodings++;
        }
    }
    return differ || encodings > 1 || (encodings && lengths);
}

/* A request head as it stands at the start of a connection's input buffer. */
typedef struct {
    span_t method, path;
    struct phr_header headers[HEAD_HEADERS_MAX];
    size_t nheaders;
    size_t len; /* bytes looked at */
} raw_head_t;

/* Parses the head at the start of sock's input: picohttpparser's result (the head's length, -2
 * when it is incomplete, -1 when it is malformed). */
static int raw_head_parse(h2o_socket_t *sock, raw_head_t *head)
{
    const char *method = NULL, *path = NULL;
    size_t method_len = 0, path_len = 0;
    int minor;
    head->nheaders = HEAD_HEADERS_MAX;
    head->len = sock->input->size < H2O_MAX_REQLEN ? sock->input->size : H2O_MAX_REQLEN;
    int n = phr_parse_request(sock->input->bytes, head->len, &method, &method_len, &path, &path_len, &minor,
                              head->headers, &head->nheaders, 0);
    head->method = (span_t){method, method_len};
    head->path = (span_t){path, path_len};
    return n;
}

/* h2o keeps neither Content-Length nor Transfer-Encoding among the headers a handler sees, so the
 * head is parsed again from the connection's input buffer, where it stays (lower-cased names aside)
 * until the answer is sent: with a body, h2o reads it after the head, and chunked decoding only
 * rewrites the bytes after the head. */
bool http_req_framing_ok(const http_request_t *request)
{
    h2o_req_t *req = http_h2o_req(request);
    h2o_socket_t *sock = req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    if (!sock || !sock->input || sock->input->size == 0)
        return true;
    raw_head_t head;
    if (raw_head_parse(sock, &head) <= 0)
        return true; /* not the head of this request: nothing to say */
    return !framing_conflicts(head.headers, head.nheaders);
}

span_t http_req_body(const http_request_t *req)
{
    h2o_iovec_t e = http_h2o_req(req)->entity;
    return (span_t){e.base ? e.base : "", e.base ? e.len : 0};
}

size_t http_req_header(const http_request_t *req, const char *name, span_t *first)
{
    const h2o_headers_t *headers = &http_h2o_req(req)->headers;
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

size_t http_req_header_all(const http_request_t *req, const char *name, span_t *values, size_t max)
{
    const h2o_headers_t *headers = &http_h2o_req(req)->headers;
    size_t name_len = strlen(name), count = 0;
    for (size_t i = 0; i < headers->size; i++) {
        const h2o_header_t *h = &headers->entries[i];
        if (h->name->len == name_len && h2o_lcstris(h->name->base, h->name->len, name, name_len)) {
            if (count < max)
                values[count] = (span_t){h->value.base, h->value.len};
            count++;
        }
    }
    return count;
}

size_t http_req_header_bytes(const http_request_t *req)
{
    const h2o_headers_t *headers = &http_h2o_req(req)->headers;
    size_t n = 0;
    for (size_t i = 0; i < headers->size; i++)
        n += headers->entries[i].name->len + headers->entries[i].value.len;
    return n;
}

uint64_t http_req_age_us(const http_request_t *req)
{
    struct timeval now, begin = http_h2o_req(req)->timestamps.request_begin_at;
    gettimeofday(&now, NULL);
    int64_t us = (int64_t)(now.tv_sec - begin.tv_sec) * 1000000 + (now.tv_usec - begin.tv_usec);
    return us > 0 ? (uint64_t)us : 0;
}

size_t http_req_peer(const http_request_t *request, char *buf, size_t len)
{
    h2o_req_t *req = http_h2o_req(request);
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

bool http_req_peer_addr(const http_request_t *request, uint8_t out[16])
{
    h2o_req_t *req = http_h2o_req(request);
    struct sockaddr_storage ss;
    socklen_t sl = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (sl == 0)
        return false;
    if (ss.ss_family == AF_INET) {
        memset(out, 0, 16);
        out[10] = out[11] = 0xff; /* ::ffff:a.b.c.d */
        memcpy(out + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
        return true;
    }
    if (ss.ss_family == AF_INET6) {
        memcpy(out, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
        return true;
    }
    return false;
}

/* --- threads and the listening sockets --- */

static void on_accept(h2o_socket_t *listener, const char *err);

static void listener_resume(h2o_timeout_entry_t *entry)
{
    thread_listener_t *l = H2O_STRUCT_FROM_MEMBER(thread_listener_t, resume, entry);
    if (l->thread->accepting)
        h2o_socket_read_start(l->sock, on_accept);
}

static void on_control(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    http_thread_t *t = H2O_STRUCT_FROM_MEMBER(http_thread_t, control, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        control_msg_t *m = H2O_STRUCT_FROM_MEMBER(control_msg_t, message.link, messages->next);
        h2o_linklist_unlink(&m->message.link);
        if (m->what == CONTROL_STOP_ACCEPTING) {
            t->accepting = false;
            for (int i = 0; i < HTTP_LISTENERS; i++) {
                thread_listener_t *l = &t->listeners[i];
                if (!l->sock)
                    continue;
                if (h2o_timeout_is_linked(&l->resume))
                    h2o_timeout_unlink(&l->resume);
                h2o_socket_read_stop(l->sock);
            }
        } else if (m->what == CONTROL_EXIT) {
            t->exit = true;
        }
        free(m);
    }
}

static void on_connection_closed(void *data)
{
    conn_slot_t *slot = data;
    if (h2o_timeout_is_linked(&slot->peek_timeout))
        h2o_timeout_unlink(&slot->peek_timeout);
    if (slot->reserve_slot)
        atomic_fetch_sub(&http_srv.reserve_used, 1);
    else
        atomic_fetch_sub(&http_srv.connections[slot->listener], 1);
    if (slot->reserved_bytes)
        atomic_fetch_sub(&http_srv.large_bytes, slot->reserved_bytes);
    http_stream_unslot(slot);
    free(slot);
}

/* Answers written straight to a socket that h2o never gets (built once, at start). */
static char overloaded_response[512], budget_response[512];

static void build_refusal(char *out, size_t len, const char *detail)
{
    char body[256];
    int n = snprintf(body, sizeof body,
                     "{\"type\":\"urn:tally:error:overloaded\",\"title\":\"Server overloaded\",\"status\":503,"
                     "\"detail\":\"%s\"}",
                     detail);
    snprintf(out, len,
             "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n"
             "Connection: close\r\nContent-Length: %d\r\n\r\n%s",
             n, body);
}

static void on_refusal_written(h2o_socket_t *sock, const char *err)
{
    (void)err;
    h2o_socket_close(sock);
}

/* Writes response and closes; a connection still being peeked stops its head timer first, so that
 * the timer cannot close the socket under the pending write. */
static void refuse(h2o_socket_t *sock, const char *response, size_t len)
{
    conn_slot_t *slot = sock->on_close.data;
    if (slot && h2o_timeout_is_linked(&slot->peek_timeout))
        h2o_timeout_unlink(&slot->peek_timeout);
    h2o_socket_read_stop(sock);
    h2o_iovec_t buf = h2o_iovec_init(response, len);
    h2o_socket_write(sock, &buf, 1, on_refusal_written);
}

static void on_peek_timeout(h2o_timeout_entry_t *entry)
{
    conn_slot_t *slot = H2O_STRUCT_FROM_MEMBER(conn_slot_t, peek_timeout, entry);
    if (slot->reserve_slot) { /* over the cap and no health check: refused as at once */
        atomic_fetch_add(&http_srv.refused, 1);
        refuse(slot->sock, overloaded_response, strlen(overloaded_response));
        return;
    }
    h2o_socket_close(slot->sock); /* a slow first head: the same end as h2o's request timeout */
}

static void hand_to_h2o(conn_slot_t *slot, bool large)
{
    h2o_socket_t *sock = slot->sock;
    if (h2o_timeout_is_linked(&slot->peek_timeout))
        h2o_timeout_unlink(&slot->peek_timeout);
    h2o_socket_read_stop(sock);
    slot->large = large;
    h2o_accept(large ? &slot->thread->accept_large : &slot->thread->accept_small, sock);
}

static bool is_health_path(span_t target)
{
    route_t route;
    route_match(route_origin_form(target), &route);
    return route.id == ROUTE_HEALTHZ || route.id == ROUTE_READYZ;
}

/* The body size a head announces: Content-Length, SIZE_MAX for chunked, 0 for none or a broken one
 * (h2o refuses the broken ones itself). */
static size_t announced_body(const struct phr_header *headers, size_t n)
{
    size_t length = 0;
    for (size_t i = 0; i < n; i++) {
        const struct phr_header *h = &headers[i];
        if (h->name_len == 17 && h2o_lcstris(h->name, h->name_len, H2O_STRLIT("transfer-encoding")))
            return SIZE_MAX;
        if (h->name_len == 14 && h2o_lcstris(h->name, h->name_len, H2O_STRLIT("content-length")) && length == 0) {
            size_t v = h2o_strtosize(h->value, h->value_len);
            length = v == SIZE_MAX ? 0 : v;
        }
    }
    return length;
}

/* The first head is complete: pick the context (or refuse). */
static void classify(conn_slot_t *slot, span_t method, span_t target, const struct phr_header *headers, size_t n)
{
    if (slot->reserve_slot) { /* over the connection cap: health checks only */
        if ((span_eq_str(method, "GET") || span_eq_str(method, "HEAD")) && is_health_path(target)) {
            slot->close_after_answer = true;
            hand_to_h2o(slot, false);
        } else {
            atomic_fetch_add(&http_srv.refused, 1);
            refuse(slot->sock, overloaded_response, strlen(overloaded_response));
        }
        return;
    }
    size_t body = announced_body(headers, n);
    bool serves_admin = slot->listener == HTTP_LISTENER_ADMIN || !http_srv.cfg.admin_listen;
    if (body <= http_srv.cfg.small_body_bytes || !serves_admin || !http_srv.cfg.admits_large_body) {
        hand_to_h2o(slot, false);
        return;
    }
    http_head_t head = {.method = method, .target = route_origin_form(target), .nheaders = n};
    for (size_t i = 0; i < n; i++) {
        head.names[i] = (span_t){headers[i].name, headers[i].name_len};
        head.values[i] = (span_t){headers[i].value, headers[i].value_len};
    }
    if (!http_srv.cfg.admits_large_body(http_srv.cfg.app, &head) ||
        (body != SIZE_MAX && body > http_srv.cfg.max_body_bytes)) {
        hand_to_h2o(slot, false); /* h2o answers 413 */
        return;
    }
    size_t want = body == SIZE_MAX ? http_srv.cfg.max_body_bytes : body;
    size_t had = atomic_fetch_add(&http_srv.large_bytes, want);
    if (had + want > http_srv.cfg.large_body_budget) {
        atomic_fetch_sub(&http_srv.large_bytes, want);
        atomic_fetch_add(&http_srv.large_refused, 1);
        refuse(slot->sock, budget_response, strlen(budget_response));
        return;
    }
    slot->reserved_bytes = want;
    hand_to_h2o(slot, true);
}

static void on_peek_read(h2o_socket_t *sock, const char *err)
{
    conn_slot_t *slot = sock->on_close.data;
    if (err != NULL) {
        h2o_socket_close(sock);
        return;
    }
    raw_head_t head;
    int n = raw_head_parse(sock, &head);
    if (n == -2 && head.len < H2O_MAX_REQLEN)
        return; /* wait for the rest of the head */
    if (n < 0) {
        if (slot->reserve_slot) {
            atomic_fetch_add(&http_srv.refused, 1);
            refuse(sock, overloaded_response, strlen(overloaded_response));
        } else {
            hand_to_h2o(slot, false); /* h2o answers the broken head as it does */
        }
        return;
    }
    classify(slot, head.method, head.path, head.headers, head.nheaders);
}

static void note_accept_error(int err)
{
    atomic_fetch_add(&http_srv.accept_errors, 1);
    bool logged = false;
    if (atomic_compare_exchange_strong(&http_srv.accept_error_logged, &logged, true))
        log_line("level=error event=accept-failed error=\"%s\" msg=\"cannot accept connections; pausing accepting "
                 "for %d ms at a time (logged once; see tally_http_accept_errors_total)\"",
                 strerror(err), ACCEPT_PAUSE_MS);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    thread_listener_t *l = listener->data;
    http_thread_t *t = l->thread;
    if (err != NULL)
        return;
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (sock == NULL) {
        int e = errno;
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
            /* The listening socket stays readable: without a pause the loop would spin on it. */
            note_accept_error(e);
            h2o_socket_read_stop(listener);
            h2o_timeout_link(t->loop, &t->pause_timeout, &l->resume);
        }
        return;
    }
    conn_slot_t *slot = calloc(1, sizeof *slot);
    if (!slot) {
        h2o_socket_close(sock);
        return;
    }
    slot->thread = t;
    slot->sock = sock;
    slot->listener = l->kind;
    slot->peek_timeout.cb = on_peek_timeout;
    size_t cap = l->kind == HTTP_LISTENER_ADMIN ? http_srv.cfg.admin_max_connections : http_srv.cfg.max_connections;
    if (atomic_fetch_add(&http_srv.connections[l->kind], 1) >= cap) {
        atomic_fetch_sub(&http_srv.connections[l->kind], 1);
        if (l->kind == HTTP_LISTENER_PUBLIC &&
            atomic_fetch_add(&http_srv.reserve_used, 1) < http_srv.cfg.health_reserve) {
            slot->reserve_slot = true;
        } else {
            if (l->kind == HTTP_LISTENER_PUBLIC)
                atomic_fetch_sub(&http_srv.reserve_used, 1);
            free(slot);
            atomic_fetch_add(&http_srv.refused, 1);
            h2o_iovec_t buf = h2o_iovec_init(overloaded_response, strlen(overloaded_response));
            h2o_socket_write(sock, &buf, 1, on_refusal_written);
            return;
        }
    }
    sock->on_close.cb = on_connection_closed;
    sock->on_close.data = slot;
    h2o_timeout_link(t->loop, slot->reserve_slot ? &t->reserve_timeout : &t->peek_timeout, &slot->peek_timeout);
    h2o_socket_read_start(sock, on_peek_read);
}

size_t http_server_connections(void)
{
    return atomic_load(&http_srv.connections[HTTP_LISTENER_PUBLIC]) +
           atomic_load(&http_srv.connections[HTTP_LISTENER_ADMIN]) + atomic_load(&http_srv.reserve_used);
}

void http_server_stats(http_server_stats_t *out)
{
    out->connections = http_server_connections();
    out->admin_connections = atomic_load(&http_srv.connections[HTTP_LISTENER_ADMIN]);
    out->refused = atomic_load(&http_srv.refused);
    out->accept_errors = atomic_load(&http_srv.accept_errors);
    out->large_bodies_refused = atomic_load(&http_srv.large_refused);
    out->large_body_bytes = atomic_load(&http_srv.large_bytes);
}

uint64_t http_server_refused(void)
{
    return atomic_load(&http_srv.refused);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    http_srv.cfg.handler(http_srv.cfg.app, (http_request_t *)req);
    return 0;
}

static void context_init(http_thread_t *t, h2o_context_t *ctx, h2o_accept_ctx_t *accept, h2o_globalconf_t *config)
{
    h2o_context_init(ctx, t->loop, config);
    accept->ctx = ctx;
    accept->hosts = config->hosts;
}

static void *thread_main(void *arg)
{
    http_thread_t *t = arg;
    char name[16];
    snprintf(name, sizeof name, "tally-http-%d", t->index);
    pthread_setname_np(pthread_self(), name);
    http_current = t;
    t->loop = h2o_evloop_create();
    context_init(t, &t->ctx_small, &t->accept_small, &http_srv.config_small);
    context_init(t, &t->ctx_large, &t->accept_large, &http_srv.config_large);
    h2o_timeout_init(t->loop, &t->peek_timeout, http_srv.cfg.request_timeout_ms);
    h2o_timeout_init(t->loop, &t->reserve_timeout, RESERVE_HEAD_MS);
    h2o_timeout_init(t->loop, &t->pause_timeout, ACCEPT_PAUSE_MS);
    t->queue = h2o_multithread_create_queue(t->loop);
    h2o_multithread_register_receiver(t->queue, &t->answers, http_on_answers);
    h2o_multithread_register_receiver(t->queue, &t->control, on_control);
    h2o_multithread_register_receiver(t->queue, &t->calls, http_on_calls);
    t->accepting = true;
    int fds[HTTP_LISTENERS] = {http_srv.cfg.listen_fd, http_srv.cfg.admin_listen ? http_srv.cfg.admin_fd : -1};
    for (int i = 0; i < HTTP_LISTENERS; i++) {
        thread_listener_t *l = &t->listeners[i];
        l->thread = t;
        l->kind = (http_listener_t)i;
        l->resume.cb = listener_resume;
        if (fds[i] < 0)
            continue;
        l->sock = h2o_evloop_socket_create(t->loop, fds[i], H2O_SOCKET_FLAG_DONT_READ);
        l->sock->data = l;
        h2o_socket_read_start(l->sock, on_accept);
    }
    h2o_barrier_wait(&http_srv.started);
    while (!t->exit)
        h2o_evloop_run(t->loop, INT32_MAX);
    return NULL;
}

static void config_init(h2o_globalconf_t *config, size_t body_limit)
{
    h2o_config_init(config);
    config->server_name = h2o_iovec_init(H2O_STRLIT("tally"));
    config->max_request_entity_size = body_limit;
    config->http1.upgrade_to_http2 = 0;
    config->http1.req_timeout = http_srv.cfg.request_timeout_ms;
    h2o_hostconf_t *host = h2o_config_register_host(config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof *handler);
    handler->on_req = on_req;
}

int http_server_start(const http_server_config_t *cfg)
{
    http_srv.cfg = *cfg;
    http_srv.nthreads = cfg->threads < 1 ? 1 : cfg->threads > MAX_THREADS ? MAX_THREADS : cfg->threads;
    build_refusal(overloaded_response, sizeof overloaded_response, "too many connections");
    build_refusal(budget_response, sizeof budget_response, "too many large request bodies in flight; retry shortly");
    config_init(&http_srv.config_small, cfg->small_body_bytes);
    config_init(&http_srv.config_large, cfg->max_body_bytes);
    h2o_barrier_init(&http_srv.started, (size_t)http_srv.nthreads + 1);
    for (int i = 0; i < http_srv.nthreads; i++) {
        http_srv.threads[i].index = i;
        h2o_multithread_create_thread(&http_srv.threads[i].tid, NULL, thread_main, &http_srv.threads[i]);
    }
    h2o_barrier_wait(&http_srv.started);
    return 0;
}

static void send_control(control_t what)
{
    for (int i = 0; i < http_srv.nthreads; i++) {
        control_msg_t *m = calloc(1, sizeof *m);
        if (!m)
            abort();
        m->what = what;
        h2o_multithread_send_message(&http_srv.threads[i].control, &m->message);
    }
}

void http_server_stop_accepting(void)
{
    send_control(CONTROL_STOP_ACCEPTING);
}

size_t http_server_drain(uint64_t timeout_ms)
{
    const struct timespec tick = {0, 5 * 1000 * 1000};
    for (uint64_t waited = 0; atomic_load(&http_srv.pending) > 0 && waited < timeout_ms; waited += 5)
        nanosleep(&tick, NULL);
    return atomic_load(&http_srv.pending);
}

void http_server_stop(void)
{
    send_control(CONTROL_EXIT);
    for (int i = 0; i < http_srv.nthreads; i++)
        pthread_join(http_srv.threads[i].tid, NULL);
}
