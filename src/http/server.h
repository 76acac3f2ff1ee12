/* server.h — the HTTP server: listening socket, HTTP threads, graceful shutdown. */
#ifndef TALLY_HTTP_SERVER_H
#define TALLY_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "core/span.h"
#include "http/request.h"

typedef void (*http_handler_fn)(void *app, http_request_t *req);

#define HTTP_HEAD_HEADERS_MAX 100 /* h2o's own limit */

/* A first request head, as read before h2o takes the connection (for admits_large_body). */
typedef struct {
    span_t method, target; /* target in origin form, with its query */
    size_t nheaders;
    span_t names[HTTP_HEAD_HEADERS_MAX], values[HTTP_HEAD_HEADERS_MAX]; /* names lower-case or not */
} http_head_t;

typedef struct {
    int listen_fd;               /* bound and listening; shared by every HTTP thread */
    bool admin_listen;           /* admin_fd is a second listener for the admin routes */
    int admin_fd;                /* bound and listening, when admin_listen */
    int threads;                 /* HTTP threads (event loops) */
    size_t small_body_bytes;     /* h2o's body limit for every connection but the admitted ones */
    size_t max_body_bytes;       /* h2o's body limit for admitted ones (--import-max-size) */
    size_t large_body_budget;    /* admitted large bodies in flight at most, in bytes, all together */
    uint64_t request_timeout_ms; /* reading a request (and idle keep-alive) */
    http_handler_fn handler;
    /* Before each answer goes out, on the request's thread: may add headers (CORS), counts it. */
    void (*on_respond)(void *app, http_request_t *req, int status, size_t body_bytes);
    /* Whether the first request of a connection, announcing a body over small_body_bytes, may send
     * it (an admin's import or recount); on a listener that serves the admin routes. */
    bool (*admits_large_body)(void *app, const http_head_t *head);
    size_t max_connections;       /* public listener: past it a new connection gets 503 and is closed */
    size_t health_reserve;        /* public listener: connections past the cap kept for health checks */
    size_t admin_max_connections; /* the admin listener's own slots */
    void *app;
} http_server_config_t;

/* Starts the HTTP threads. Returns 0, or -1. */
int http_server_start(const http_server_config_t *cfg);

/* Stops accepting connections; requests already received are still answered. */
void http_server_stop_accepting(void);

/* Waits until no deferred request is left unanswered, or timeout_ms passes. Returns how many are
 * still unanswered. */
size_t http_server_drain(uint64_t timeout_ms);

/* Connections open now, and those refused for the limit. */
size_t http_server_connections(void);
uint64_t http_server_refused(void);

typedef struct {
    size_t connections, admin_connections;
    uint64_t refused;              /* at the connection caps */
    uint64_t accept_errors;        /* accept failed for want of file descriptors or memory */
    uint64_t large_bodies_refused; /* past large_body_budget */
    size_t large_body_bytes;       /* reserved by admitted large bodies now */
} http_server_stats_t;

void http_server_stats(http_server_stats_t *out);

/* Ends the HTTP threads. */
void http_server_stop(void);

/* --- streaming answers (server-sent events) and calls onto the HTTP threads --- */

typedef struct http_stream http_stream_t;

/* On req's thread: starts a 200 answer of content_type (with Cache-Control: no-cache) whose body is
 * sent as it is written (chunked), answers nothing else on the connection and closes it at the end.
 * on_end(arg) runs once, on this thread, when the stream is over for whatever reason (the client
 * left, it was dropped, or ended and sent); the handle is invalid from then on. Returns NULL when
 * out of memory (nothing sent: the caller answers). */
http_stream_t *http_stream_open(http_request_t *req, const char *content_type, size_t max_unsent,
                                void (*on_end)(void *arg), void *arg);

/* http_stream_open for a body written one part at a time as the client takes it (an export): with
 * on_drain set from the start (http_stream_on_drain), and a kernel send buffer large enough for bulk
 * (an event stream's small one would pace a long body by delayed ACKs), still bounded. */
http_stream_t *http_stream_open_paced(http_request_t *req, const char *content_type, size_t max_unsent,
                                      void (*on_end)(void *arg), void (*on_drain)(void *arg), void *arg);

/* On req's thread: answers a HEAD of what http_stream_open would stream: its status and headers,
 * no body, no stream. */
void http_stream_head(http_request_t *req, const char *content_type);

/* The stream's thread: on_drain(arg) runs each time all that was written has been handed to the
 * connection (the client is taking it), so that a long body is written one part at a time, as fast as
 * the client reads, never all at once. */
void http_stream_on_drain(http_stream_t *s, void (*on_drain)(void *arg));

/* The stream's thread: queues n bytes. Returns 0; 1 when nothing was written because the stream is
 * ending (http_stream_end, the client left, or dropped before); -1 when the bytes written and not
 * yet sent would pass max_unsent (a client that stopped reading): the connection is then dropped,
 * and on_end follows (maybe during this call). */
int http_stream_write(http_stream_t *s, const char *p, size_t n);

/* The stream's thread: ends the stream once what was written is sent. */
void http_stream_end(http_stream_t *s);

/* The stream's thread: closes its connection now, whatever is unsent (a stream that would not end
 * in time at shutdown); on_end follows (maybe during this call). */
void http_stream_drop(http_stream_t *s);

/* The stream's thread: the bytes its connection has taken so far (a client still reading makes it
 * grow; one that stopped does not). */
uint64_t http_stream_taken(const http_stream_t *s);

/* The index (0 .. http_thread_count() - 1) of the calling HTTP thread, or -1 on another thread. */
int http_thread_index(void);
int http_thread_count(void);

/* Any thread: fn(arg) runs on HTTP thread i's event loop, soon, in the order posted. Returns 0, or
 * -1 when out of memory or there is no such thread (fn will not run). */
int http_thread_post(int i, void (*fn)(void *arg), void *arg);

#endif
