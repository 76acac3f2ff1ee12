/* server.h — the HTTP server: listening socket, HTTP threads, graceful shutdown. */
#ifndef TALLY_HTTP_SERVER_H
#define TALLY_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "http/request.h"

typedef void (*http_handler_fn)(void *app, http_request_t *req);

typedef struct {
    int listen_fd;               /* bound and listening; shared by every HTTP thread */
    int threads;                 /* HTTP threads (event loops) */
    size_t max_body_bytes;       /* h2o's own limit: kept well above what handlers accept */
    uint64_t request_timeout_ms; /* reading a request (and idle keep-alive) */
    http_handler_fn handler;
    /* Before each answer goes out, on the request's thread: may add headers (CORS), counts it. */
    void (*on_respond)(void *app, http_request_t *req, int status, size_t body_bytes);
    size_t max_connections; /* past it a new connection gets 503 and is closed */
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

/* Ends the HTTP threads. */
void http_server_stop(void);

#endif
