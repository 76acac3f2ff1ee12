/* export.h — GET /v1/users/{user}/export and GET /v1/admin/export: exports streamed as NDJSON in
 * constant memory. Each export runs on a thread of its own that holds the store's snapshot
 * (engine/export.h) and renders one page while the HTTP thread sends the one before; the next page is
 * rendered only once the client has taken what was sent (http_stream_on_drain), so a slow reader
 * holds at most two pages, never the body. */
#ifndef TALLY_HTTP_EXPORT_H
#define TALLY_HTTP_EXPORT_H

#include "http/app.h"

/* The largest body a page may leave unsent: far above a page (EXPORT_PAGE_ROWS lines of at most two
 * ids and every kind), so that only a stream gone wrong reaches it. */
#define EXPORT_STREAM_MAX_UNSENT (8u << 20)

typedef struct {
    size_t max_exports;     /* --max-exports: exports at once; past it 503 with Retry-After */
    uint64_t timeout_ms;    /* --export-timeout: how long an export may hold its snapshot */
    unsigned retry_after_s; /* the Retry-After of a 503 past the cap */
} export_http_options_t;

/* Sets the options; before the HTTP threads start. */
void export_http_setup(const export_http_options_t *opt);

/* The routes (HTTP thread). user: the raw path segment. */
void export_http_user(app_t *app, http_request_t *req, span_t user);
void export_http_admin(app_t *app, http_request_t *req);

/* Shutdown: every export in progress lets go of its snapshot and its answer is cut (no closing
 * line); then waits, while the event loops still run, until every export thread is over or
 * timeout_ms passes. Returns how many are still running. Main thread, before http_server_stop and
 * before the store is closed. */
size_t export_http_end_all(uint64_t timeout_ms);

typedef struct {
    size_t running;                   /* exports holding a snapshot now */
    uint64_t started, completed, cut; /* cut: the time ran out, the client left, or shutdown */
    uint64_t refused;                 /* past --max-exports: 503 */
    uint64_t failed;                  /* the store failed */
    uint64_t lines;                   /* lines sent by exports that ended (the closing lines not counted) */
} export_http_stats_t;

void export_http_stats(export_http_stats_t *out);

#endif
