/* app.h — what the HTTP handlers share (app.c, below them): configuration, the store for reads, the
 * writer for writes, the answers' helpers. */
#ifndef TALLY_HTTP_APP_H
#define TALLY_HTTP_APP_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/jwt.h"
#include "core/kinds.h"
#include "core/ratelimit.h"
#include "engine/authkeys.h"
#include "engine/features.h"
#include "engine/feed.h"
#include "engine/policies.h"
#include "engine/readers.h"
#include "engine/shards.h"
#include "engine/trending.h"
#include "engine/voids.h"
#include "engine/webhooks.h"
#include "engine/writer.h"
#include "http/client.h"
#include "http/request.h"
#include "http/router.h"
#include "http/server.h"
#include "store/store.h"

#define BODY_MAX_BYTES 4096 /* docs/api.md: request bodies over 4 KiB are refused with 413 */
#define BATCH_IDS_MAX 100
#define TARGET_MAX_BYTES 8192 /* longer request targets: 414 */

#define RECOUNT_ITEMS_MAX 10000

#define STATUS_CODES 600 /* per-route counters are indexed by status code */
#define CORS_ORIGINS_MAX 16

/* Who may read a list (--who-reacted: admin, users, public; --user-reactions: owner, users, public). */
typedef enum {
    LIST_ACCESS_ADMIN,  /* admins only */
    LIST_ACCESS_OWNER,  /* the user the list is of, and admins */
    LIST_ACCESS_USERS,  /* any authenticated user */
    LIST_ACCESS_PUBLIC, /* anyone */
} list_access_t;

/* --cors-origin's values; "*" allows any origin. */
typedef struct {
    int count;
    const char *origins[CORS_ORIGINS_MAX];
} cors_list_t;

/* What a node runs for one shard: its store, its writer (thread and session) and its change feed.
 * Everything about an item lives on the item's shard (app_item_shard). */
typedef struct {
    struct app *app;
    uint32_t k; /* its position: shard k of the cluster */
    store_t *store;
    writer_t *writer;
    feed_t *feed;
    voids_t *voids; /* the voided users as this shard's flags say (app->voids: shard 0's) */
    /* When a reaction write on this shard last failed to commit (wall ms), seen as its answer comes
     * back: /readyz and tally_writes_failing say "writes failing" for a while after it. */
    atomic_uint_fast64_t last_write_failed_ms;
} app_shard_t;

typedef struct app {
    const kinds_t *kinds;
    shards_t *shards; /* the node's stores, one per shard, and the cluster's identity */
    size_t nshards;
    app_shard_t shard[SHARD_MAX];
    /* Shard 0's: the cluster-wide records (policies, webhooks, settings, feature versions) live there. */
    store_t *store;
    writer_t *writer;
    readers_t *readers; /* reads run here when the store's reads wait on a server; NULL: on the HTTP threads */
    feed_t *feed;
    policies_t *policies; /* the item policies in force */
    voids_t *voids;       /* the voided users known on this node */
    features_t *features; /* the feature version in force, this node's heartbeat */
    trending_t *trending;
    webhooks_t *webhooks;
    const char *data_dir;
    bool dev_mode;     /* no JWT secret: the user is the X-User-Id header */
    auth_keys_t *keys; /* JWT secrets, when not in development mode */
    atomic_bool ready;
    atomic_bool draining;   /* shutting down: writes not yet queued are refused with 503 */
    atomic_bool admin_busy; /* one long admin job at a time */
    atomic_uint_fast64_t responses[ROUTE_COUNT][STATUS_CODES]; /* [route][status] */
    atomic_uint_fast64_t rate_limited;
    /* What SIGHUP may change is read through atomics: a reload publishes a new value whole. */
    ratelimit_t *_Atomic write_limit;           /* per user; NULL = off */
    ratelimit_t *_Atomic read_limit;            /* per client address, reads without a user; NULL = off */
    const client_rules_t *_Atomic client_rules; /* who the client is behind trusted proxies (reloads) */
    atomic_uint_fast64_t forwarded;             /* requests whose client a trusted proxy named */
    atomic_uint_fast64_t forwarded_invalid;     /* trusted proxies' headers that could not be used */
    const cors_list_t *_Atomic cors;            /* NULL: no origin allowed; lists replaced are kept till exit */
    size_t max_header_bytes;                    /* larger header sections are refused with 431 */
    FILE *_Atomic access_log;                   /* one line per answer, when set */
    bool admin_listen;                          /* a second listener serves the admin routes (and the public one not) */
    _Atomic list_access_t who_reacted, user_reactions; /* who may read the lists */
    double start_time_s;                               /* Unix time, for tally_start_time_seconds */
    char *openapi_json;                                /* GET /v1/openapi.json, rendered at start-up (openapi.h) */
    size_t openapi_len;
    char openapi_etag[48]; /* a strong ETag of it, quoted */
    /* Cache-Control max-age of public reads (--public-max-age, whole seconds; 0: no-cache). Atomic:
     * a reload may change it while reads are answered. */
    atomic_uint public_max_age_s;
} app_t;

/* The shard an item lives on, and a user's (their own list, their idempotency claims). Any thread. */
app_shard_t *app_item_shard(app_t *app, span_t item);
app_shard_t *app_user_shard(app_t *app, span_t user);

/* Reply helpers: each sends the answer; the caller just returns. */
void reply_problem(http_request_t *req, int status, const char *code, const char *detail); /* 503: Retry-After 1 */
/* The headers a problem answer may carry besides its body. */
typedef struct {
    unsigned retry_after_s;
    const char *allow; /* a static string */
    bool www_authenticate;
} problem_headers_t;
void reply_problem_with(http_request_t *req, int status, const char *code, const char *detail, problem_headers_t h);
void reply_json(http_request_t *req, int status, json_t *body); /* takes the reference */
void reply_body(http_request_t *req, int status, answer_type_t type, char *body,
                size_t len); /* takes body (malloc'd) */

/* True while a reaction write failed to commit less than WRITES_FAILING_HOLD_MS ago. */
#define WRITES_FAILING_HOLD_MS 10000
bool app_shard_writes_failing(app_shard_t *shard);
bool app_writes_failing(app_t *app); /* on some shard */

/* ISO 8601 UTC with milliseconds: 2026-11-29T20:01:02.345Z. */
void app_iso_time(uint64_t at_ms, char out[32]);

/* Hands a read to the reader threads (app->readers set: the store's reads wait on a server, not on
 * this event loop): job->run = run, *pending = req's deferred answer, which run answers. When no
 * reader takes it, owner (the request's read, job inside it, from malloc) is freed and 503 sent.
 * Either way the caller has nothing more to do. */
void app_read_submit(app_t *app, http_request_t *req, read_job_t *job, void (*run)(read_job_t *job),
                     http_pending_t **pending, void *owner);

/* Takes a token from the bucket of key; false having replied 429 when there is none. */
bool rate_or_reply(app_t *app, ratelimit_t *limit, http_request_t *req, span_t key);

#endif
