/* live.h — GET /v1/live: live counts as server-sent events (docs/api.md § Live counts). The streams
 * live on the HTTP threads; engine/live.c follows the log and hands them counts, which travel to
 * each stream's thread through h2o's multithread queues (server.h's http_thread_post). */
#ifndef TALLY_HTTP_LIVE_H
#define TALLY_HTTP_LIVE_H

#include "engine/live.h"
#include "http/app.h"

#define LIVE_STREAM_BUFFER_BYTES (64u << 10) /* unsent bytes a stream may have beyond its first events */
/* An event's largest size: id, event and data lines, item, reactors (fixed) and one count per kind
 * ("name":-9223372036854775808, with a 32-byte name). */
#define LIVE_EVENT_FIXED_BYTES 160
#define LIVE_EVENT_PER_KIND_BYTES (KIND_NAME_MAX + 24)

typedef struct {
    size_t max_streams;            /* --max-live-streams */
    size_t max_streams_per_client; /* --max-live-streams-per-client */
    live_options_t follow;         /* --live-interval, --live-keepalive */
} live_http_options_t;

/* Starts the followers, one per shard (after the HTTP threads). Returns 0, or -1. */
int live_http_start(app_t *app, const live_http_options_t *opt);

/* The route (HTTP thread). */
void live_http_get(app_t *app, http_request_t *req, span_t query);

/* Shutdown, in order: no new stream is opened; the follower is halted (no update is produced or
 * posted after this returns); then every open stream is ended cleanly (once what it was sent has
 * left) by its HTTP thread, after every update posted to that thread before. Returns at once; the
 * HTTP threads end the streams. Main thread, while the event loops run. */
void live_http_end_all(void);

/* Waits (while the event loops still run) until every HTTP thread has ended its streams and every
 * stream is over; past half of timeout_ms a stream whose client took nothing since the streams were
 * ended (or since the last look, a quarter second before) is dropped: a client still reading gets
 * its last chunk, within timeout_ms. Returns
 * how many streams were still open at timeout_ms (0: all ended). Main thread, after
 * live_http_end_all, before http_server_stop. */
size_t live_http_wait_ended(uint64_t timeout_ms);

/* Frees the follower; after http_server_stop (no stream is left to unsubscribe). */
void live_http_stop(void);

typedef struct {
    size_t open;                      /* streams open now */
    uint64_t opened, events, dropped; /* streams opened; events sent; streams dropped as slow */
    uint64_t refused;                 /* past a cap: 503 */
    uint64_t errors;                  /* failed reads of the followers (every shard's) */
    size_t shards;                    /* followers: one per shard */
    uint64_t cursor[SHARD_MAX];       /* [k]: the checkpoint shard k's follower last read */
} live_http_stats_t;

void live_http_stats(live_http_stats_t *out);

#endif
