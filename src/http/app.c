/* app.c — request dispatch: route, method, then the route's handler; health and readiness. */
#include "http/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "http/router.h"

void reply_problem(http_request_t *req, int status, const char *code, const char *detail)
{
    answer_t a = {0};
    answer_problem(&a, status, code, detail);
    if (status == 503)
        a.retry_after_s = 1;
    http_respond(req, &a);
    answer_free(&a);
}

void reply_body(http_request_t *req, int status, answer_type_t type, char *body, size_t len)
{
    answer_t a = {0};
    answer_set_body(&a, status, type, body, len);
    http_respond(req, &a);
    answer_free(&a);
}

void reply_json(http_request_t *req, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        reply_problem(req, 500, "internal", "out of memory");
    else
        reply_body(req, status, ANSWER_JSON, text, strlen(text));
}

static void reply_health(http_request_t *req, bool ok)
{
    reply_json(req, ok ? 200 : 503, json_pack("{s:s}", "status", ok ? "ok" : "unavailable"));
}

bool rate_or_reply(app_t *app, ratelimit_t *limit, http_request_t *req, span_t key)
{
    unsigned wait_s = ratelimit_take(limit, key, mono_ms());
    if (wait_s == 0)
        return true;
    atomic_fetch_add_explicit(&app->rate_limited, 1, memory_order_relaxed);
    answer_t a = {0};
    answer_problem(&a, 429, "rate-limited", "too many requests; retry after the time in Retry-After");
    a.retry_after_s = wait_s;
    http_respond(req, &a);
    answer_free(&a);
    return false;
}

bool read_rate_or_reply(app_t *app, http_request_t *req, const auth_t *who)
{
    char peer[64];
    if (who->known || !app->read_limit)
        return true;
    size_t n = http_req_peer(req, peer, sizeof peer);
    return rate_or_reply(app, app->read_limit, req, (span_t){peer, n});
}

/* The allowed origin matching the request's Origin header, if any. */
static const char *cors_origin(const app_t *app, http_request_t *req, span_t *origin)
{
    if (app->ncors == 0 || http_req_header(req, "origin", origin) != 1)
        return NULL;
    for (int i = 0; i < app->ncors; i++)
        if (strcmp(app->cors_origins[i], "*") == 0 || span_eq_str(*origin, app->cors_origins[i]))
            return app->cors_origins[i];
    return NULL;
}

/* ts=… method=… route=… status=… bytes=… us=… peer=… target="…" — the target is printable ASCII
 * (h2o refuses control bytes in it); quotes and backslashes are escaped. */
static void access_log_line(app_t *app, http_request_t *req, route_id_t route, int status, size_t body_bytes)
{
    char peer[64], target[512], ts[32];
    span_t t = http_req_target(req), m = http_req_method(req);
    size_t n = 0;
    for (size_t i = 0; i < t.len && n + 2 < sizeof target; i++) {
        if (t.ptr[i] == '"' || t.ptr[i] == '\\')
            target[n++] = '\\';
        target[n++] = t.ptr[i];
    }
    target[n] = '\0';
    size_t plen = http_req_peer(req, peer, sizeof peer);
    peer[plen] = '\0';
    uint64_t now = wall_ms();
    time_t secs = (time_t)(now / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(app->access_log, "ts=%s.%03uZ method=%.*s route=%s status=%d bytes=%zu us=%llu peer=%s target=\"%s\"\n", ts,
            (unsigned)(now % 1000), (int)(m.len > 16 ? 16 : m.len), m.ptr, route_name(route), status, body_bytes,
            (unsigned long long)http_req_age_us(req), plen ? peer : "-", target);
}

void app_on_respond(void *arg, http_request_t *req, int status, size_t body_bytes)
{
    app_t *app = arg;
    route_t route;
    route_match(http_req_target(req), &route);
    if (status >= 0 && status < STATUS_CODES && route.id < ROUTE_COUNT)
        atomic_fetch_add_explicit(&app->responses[route.id][status], 1, memory_order_relaxed);
    if (app->access_log)
        access_log_line(app, req, route.id, status, body_bytes);
    span_t origin;
    const char *allowed = cors_origin(app, req, &origin);
    if (!allowed)
        return;
    /* Never credentials: tally authenticates with a Bearer header, not cookies. */
    if (strcmp(allowed, "*") == 0) {
        http_add_header(req, "access-control-allow-origin", "*");
    } else {
        char value[512];
        snprintf(value, sizeof value, "%.*s", (int)origin.len, origin.ptr);
        http_add_header(req, "access-control-allow-origin", value);
        http_add_header(req, "vary", "Origin");
    }
    http_add_header(req, "access-control-expose-headers", "ETag, Idempotent-Replayed, Retry-After");
}

/* OPTIONS: a CORS preflight when the origin is allowed, else the route's methods. */
static void reply_options(app_t *app, http_request_t *req, route_id_t id)
{
    span_t origin, method;
    answer_t a = {.status = 204, .type = ANSWER_JSON, .allow = route_allow(id)};
    if (cors_origin(app, req, &origin) && http_req_header(req, "access-control-request-method", &method) == 1) {
        http_add_header(req, "access-control-allow-methods", route_allow(id));
        http_add_header(req, "access-control-allow-headers",
                        app->dev_mode ? "Authorization, Content-Type, Idempotency-Key, If-Match, X-User-Id"
                                      : "Authorization, Content-Type, Idempotency-Key, If-Match");
        http_add_header(req, "access-control-max-age", "600");
    }
    http_respond(req, &a);
}

void app_handle(void *arg, http_request_t *req)
{
    app_t *app = arg;
    route_t route;
    span_t method = http_req_method(req);
    route_match(http_req_target(req), &route);
    if (http_req_header_bytes(req) > app->max_header_bytes) {
        reply_problem(req, 431, "headers-too-large", "the request's headers are larger than --max-header-size");
        return;
    }
    if (route.id == ROUTE_NOT_FOUND) {
        reply_problem(req, 404, "not-found", "no such route");
        return;
    }
    if (span_eq_str(method, "OPTIONS")) {
        reply_options(app, req, route.id);
        return;
    }
    if (!route_allows(route.id, method)) {
        answer_t a = {0};
        answer_problem(&a, 405, "method-not-allowed", "this route does not take that method");
        a.allow = route_allow(route.id);
        http_respond(req, &a);
        answer_free(&a);
        return;
    }
    bool read = span_eq_str(method, "GET") || span_eq_str(method, "HEAD");
    switch (route.id) {
    case ROUTE_HEALTHZ:
        reply_health(req, true);
        return;
    case ROUTE_READYZ:
        reply_health(req, atomic_load(&app->ready) && atomic_load(&writer_stats(app->writer)->running) &&
                              store_ready(app->store));
        return;
    case ROUTE_ITEMS:
        items_get_many(app, req, route.query);
        return;
    case ROUTE_ITEM:
        items_get_one(app, req, route.item);
        return;
    case ROUTE_REACTION:
        if (read)
            items_get_reaction(app, req, route.item);
        else
            items_write(app, req, route.item, SPAN_LIT("reaction"));
        return;
    case ROUTE_TOGGLE:
        items_write(app, req, route.item, SPAN_LIT("reaction:toggle"));
        return;
    case ROUTE_KIND:
        items_write(app, req, route.item, route.kind);
        return;
    case ROUTE_METRICS:
        metrics_get(app, req);
        return;
    case ROUTE_CHANGES:
        changes_get(app, req, route.query);
        return;
    case ROUTE_RECOUNT:
        admin_recount(app, req);
        return;
    case ROUTE_TRENDING:
        trending_get(app, req, route.query);
        return;
    case ROUTE_HOT:
        hot_get(app, req);
        return;
    case ROUTE_IMPORT:
        admin_import(app, req, route.query);
        return;
    case ROUTE_ADMIN_USER:
    case ROUTE_ADMIN_ITEM:
        admin_clear(app, req, route.item, route.id == ROUTE_ADMIN_USER);
        return;
    case ROUTE_NOT_FOUND:
    case ROUTE_COUNT:
        break;
    }
    reply_problem(req, 404, "not-found", "no such route");
}
