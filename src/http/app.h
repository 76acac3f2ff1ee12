/* app.h — what the HTTP handlers share: configuration, the store for reads, the writer for writes. */
#ifndef TALLY_HTTP_APP_H
#define TALLY_HTTP_APP_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/jwt.h"
#include "core/kinds.h"
#include "core/ratelimit.h"
#include "engine/feed.h"
#include "engine/trending.h"
#include "engine/writer.h"
#include "http/request.h"
#include "http/router.h"
#include "store/store.h"

#define BODY_MAX_BYTES 4096 /* API.md: request bodies over 4 KiB are refused with 413 */
#define BATCH_IDS_MAX 100

#define RECOUNT_ITEMS_MAX 10000

/* The JWT secrets in force; replaced as a whole on reload (SIGHUP). */
typedef struct {
    pthread_rwlock_t lock;
    char *text; /* the file's bytes, or the environment's secret */
    span_t secrets[JWT_SECRETS_MAX];
    int count;
} auth_keys_t;
#define STATUS_CODES 600 /* per-route counters are indexed by status code */
#define CORS_ORIGINS_MAX 16

typedef struct {
    const kinds_t *kinds;
    store_t *store;
    writer_t *writer;
    feed_t *feed;
    trending_t *trending;
    const char *data_dir;
    bool dev_mode;     /* no JWT secret: the user is the X-User-Id header */
    auth_keys_t *keys; /* JWT secrets, when not in development mode */
    atomic_bool ready;
    atomic_bool draining;   /* shutting down: writes not yet queued are refused with 503 */
    atomic_bool admin_busy; /* one long admin job at a time */
    atomic_uint_fast64_t responses[ROUTE_COUNT][STATUS_CODES]; /* [route][status] */
    atomic_uint_fast64_t rate_limited;
    ratelimit_t *write_limit;                   /* per user; NULL = off */
    ratelimit_t *read_limit;                    /* per client address, reads without a user; NULL = off */
    const char *cors_origins[CORS_ORIGINS_MAX]; /* "*" allows any origin */
    int ncors;
    size_t max_header_bytes; /* larger header sections are refused with 431 */
    FILE *access_log;        /* one line per answer, when set */
} app_t;

/* The request handler (HTTP threads): routes, checks methods, dispatches. */
void app_handle(void *app, http_request_t *req);

/* Reply helpers: each sends the answer; the caller just returns. */
void reply_problem(http_request_t *req, int status, const char *code, const char *detail);
void reply_json(http_request_t *req, int status, json_t *body); /* takes the reference */
void reply_body(http_request_t *req, int status, answer_type_t type, char *body,
                size_t len); /* takes body (malloc'd) */

/* Who is asking. */
typedef struct {
    bool known; /* a user was given */
    span_t user;
    bool admin;
} auth_t;

/* Identifies the user. With required, a request without a user is answered 401. Returns true, or
 * false having replied (401, 400 invalid-user-id). */
bool auth_user_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who);

/* Loads the secrets: from the file when given (one per line), else from secret. Returns 0, or -1
 * with a message in err (the keys in force are kept). */
int auth_keys_load(auth_keys_t *keys, const char *file, const char *secret, char *err, size_t errlen);

/* Admin rights, or a 401/403 answer. */
bool auth_admin_or_reply(const app_t *app, http_request_t *req);

/* Called by the server before each answer goes out: CORS headers, the metrics. */
void app_on_respond(void *app, http_request_t *req, int status, size_t body_bytes);

/* Takes a token from the bucket of key; false having replied 429 when there is none. */
bool rate_or_reply(app_t *app, ratelimit_t *limit, http_request_t *req, span_t key);

/* Public reads without a user are limited per client address (--read-rate-limit), so one scraper
 * cannot starve the feed; false having replied 429. */
bool read_rate_or_reply(app_t *app, http_request_t *req, const auth_t *who);

void metrics_get(app_t *app, http_request_t *req);
void trending_get(app_t *app, http_request_t *req, span_t query);
void hot_get(app_t *app, http_request_t *req);
void changes_get(app_t *app, http_request_t *req, span_t query);
void admin_recount(app_t *app, http_request_t *req);
void admin_import(app_t *app, http_request_t *req, span_t query);
/* DELETE /v1/admin/users/{user} (user) or /v1/admin/items/{item}: every reaction becomes none. */
void admin_clear(app_t *app, http_request_t *req, span_t name, bool user);

/* Handlers of the item routes (http/items.c). */
void items_get_one(app_t *app, http_request_t *req, span_t item);
void items_get_many(app_t *app, http_request_t *req, span_t query);
void items_get_reaction(app_t *app, http_request_t *req, span_t item);
void items_write(app_t *app, http_request_t *req, span_t item, span_t action);

#endif
