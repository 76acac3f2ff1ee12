/* dispatch.h — the HTTP server's handler (dispatch.c): what tallyd gives http_server_start. */
#ifndef TALLY_HTTP_DISPATCH_H
#define TALLY_HTTP_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "http/request.h"
#include "http/server.h"

/* The request handler (HTTP threads): routes, checks methods, dispatches. */
void app_handle(void *app, http_request_t *req);

/* Called by the server before each answer goes out: CORS headers, the metrics. */
void app_on_respond(void *app, http_request_t *req, int status, size_t body_bytes);

/* Whether a connection's first request may send a body past the small limit: a POST to import or
 * recount from an admin (server.c's admits_large_body). */
bool app_admits_large_body(void *app, const http_head_t *head);

#endif
