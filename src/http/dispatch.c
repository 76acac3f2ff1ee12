/* dispatch.c — request dispatch, above the handlers: route, listener, method, then the route's
 * handler; health and readiness; what goes out with every answer (CORS headers, the metrics, the
 * access log). The handlers' shared toolkit is app.c, below them. */
#include "http/dispatch.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/admin.h"
#include "http/app.h"
#include "http/auth.h"
#include "http/changes.h"
#include "http/export.h"
#include "http/items.h"
#include "http/lists.h"
#include "http/live.h"
#include "http/metrics.h"
#include "http/policies_admin.h"
#include "http/router.h"
#include "http/trends.h"
#include "http/ui.h"
#include "http/voids_admin.h"
#include "http/webhooks_admin.h"

static void reply_health(http_request_t *req, bool ok)
{
    reply_json(req, ok ? 200 : 503, json_pack("{s:s}", "status", ok ? "ok" : "unavailable"));
}

/* /readyz: the store open and the pipeline running, the identity provider's keys loaded (when a
 * JWKS URL is given), and writes not failing (an orchestrator takes a node whose every write fails
 * out of rotation). With several shards the node is ready while one shard is served (its writer
 * running, its database answering, its writes not refused or failing), and names the others: their
 * items answer 503 meanwhile. */
static void reply_ready(app_t *app, http_request_t *req)
{
    json_t *unreachable = json_array(), *failing = json_array();
    size_t reachable = 0, served = 0;
    char why[256] = "";
    for (size_t k = 0; k < app->nshards; k++) {
        app_shard_t *shard = &app->shard[k];
        char refused[256];
        if (!atomic_load(&writer_stats(shard->writer)->running) || !store_ready(shard->store)) {
            json_array_append_new(unreachable, json_integer((json_int_t)k));
            continue;
        }
        reachable++;
        if (store_writes_refused(shard->store, refused, sizeof refused)) {
            if (!why[0])
                snprintf(why, sizeof why, "%s", refused);
        } else if (app_shard_writes_failing(shard)) {
            if (!why[0])
                snprintf(why, sizeof why,
                         "writes failing: a write could not be committed in the last 10 s (is the "
                         "disk full?)");
        } else {
            served++;
            continue;
        }
        json_array_append_new(failing, json_integer((json_int_t)k));
    }
    const char *reason = NULL;
    if (!atomic_load(&app->ready) || reachable == 0 || !unreachable || !failing)
        reason = ""; /* not started, stopping, or no database can be reached */
    else if (!app->dev_mode && app->keys && !auth_keys_ready(app->keys))
        reason = "no key set loaded yet from --jwt-jwks-url: requests that need a user get 503";
    else if (served == 0)
        reason = why;
    if (reason) {
        json_decref(unreachable);
        json_decref(failing);
        if (!reason[0]) {
            reply_health(req, false);
            return;
        }
        answer_t a = {0};
        answer_json(&a, 503, json_pack("{s:s,s:s}", "status", "unavailable", "reason", reason));
        a.retry_after_s = 1;
        http_respond(req, &a);
        answer_free(&a);
        return;
    }
    json_t *body = json_pack("{s:s}", "status", "ok");
    if (body && json_array_size(unreachable))
        json_object_set(body, "unreachable_shards", unreachable);
    if (body && json_array_size(failing))
        json_object_set(body, "failing_shards", failing);
    json_decref(unreachable);
    json_decref(failing);
    reply_json(req, 200, body);
}

/* The allowed origin matching the request's Origin header, if any. */
static const char *cors_origin(app_t *app, http_request_t *req, span_t *origin)
{
    const cors_list_t *cors = atomic_load(&app->cors);
    if (!cors || cors->count == 0 || http_req_header(req, "origin", origin) != 1)
        return NULL;
    for (int i = 0; i < cors->count; i++)
        if (strcmp(cors->origins[i], "*") == 0 || span_eq_str(*origin, cors->origins[i]))
            return cors->origins[i];
    return NULL;
}

/* ts=… method=… route=… status=… bytes=… us=… peer=… [proxy=…] target="…" — peer is the client
 * (behind a trusted proxy the address it named, and proxy the proxy's); the target is printable
 * ASCII (h2o refuses control bytes in it); quotes and backslashes are escaped. */
static void access_log_line(app_t *app, FILE *out, http_request_t *req, route_id_t route, int status, size_t body_bytes)
{
    char target[512], ts[32], proxy[FORWARDED_TEXT_MAX + 8] = "";
    span_t t = http_req_target(req), m = http_req_method(req);
    size_t n = 0;
    for (size_t i = 0; i < t.len && n + 2 < sizeof target; i++) {
        if (t.ptr[i] == '"' || t.ptr[i] == '\\')
            target[n++] = '\\';
        target[n++] = t.ptr[i];
    }
    target[n] = '\0';
    http_client_t client;
    http_client_of(atomic_load(&app->client_rules), req, &client);
    if (client.peer_len)
        snprintf(proxy, sizeof proxy, " proxy=%s", client.peer);
    app_iso_time(wall_ms(), ts);
    log_line_to(out, "ts=%s method=%.*s route=%s status=%d bytes=%zu us=%llu peer=%s%s target=\"%s\"", ts,
                (int)(m.len > 16 ? 16 : m.len), m.ptr, route_name(route), status, body_bytes,
                (unsigned long long)http_req_age_us(req), client.known ? client.text : "-", proxy, target);
}

void app_on_respond(void *arg, http_request_t *req, int status, size_t body_bytes)
{
    app_t *app = arg;
    route_t route;
    route_match(http_req_target(req), &route);
    if (status >= 0 && status < STATUS_CODES && route.id < ROUTE_COUNT)
        atomic_fetch_add_explicit(&app->responses[route.id][status], 1, memory_order_relaxed);
    FILE *access_log = atomic_load(&app->access_log);
    if (access_log)
        access_log_line(app, access_log, req, route.id, status, body_bytes);
    /* The item reads' bodies depend on who asks (viewer) and, with CORS, on the Origin: a cache
     * must key them on these, on every answer of the route (a 304 and an error too). */
    bool vary_user =
        route.id == ROUTE_ITEM || route.id == ROUTE_ITEMS || route.id == ROUTE_VIEWER || route.id == ROUTE_REACTION;
    if (vary_user) {
        const cors_list_t *cors = atomic_load(&app->cors);
        http_add_header(req, "vary",
                        cors && cors->count ? "Authorization, X-User-Id, Origin" : "Authorization, X-User-Id");
    }
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
        if (!vary_user)
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
                        app->dev_mode
                            ? "Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match, X-User-Id"
                            : "Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match");
        http_add_header(req, "access-control-max-age", "600");
    }
    http_respond(req, &a);
}

/* A Host (or absolute-form authority) that names this machine: localhost, 127.x.y.z or [::1],
 * with or without a port. */
static bool host_is_loopback(span_t host)
{
    span_t name = host;
    if (name.len && name.ptr[0] == '[') {
        const char *close = memchr(name.ptr, ']', name.len);
        if (!close)
            return false;
        size_t n = (size_t)(close - name.ptr) + 1;
        if (n < name.len && name.ptr[n] != ':')
            return false;
        return span_eq_str((span_t){name.ptr, n}, "[::1]");
    }
    const char *colon = name.len ? memchr(name.ptr, ':', name.len) : NULL;
    if (colon)
        name.len = (size_t)(colon - name.ptr);
    if (name.len == 9 && strncasecmp(name.ptr, "localhost", 9) == 0)
        return true;
    char text[64];
    struct in_addr addr;
    if (name.len == 0 || name.len >= sizeof text)
        return false;
    memcpy(text, name.ptr, name.len);
    text[name.len] = '\0';
    return inet_pton(AF_INET, text, &addr) == 1 && (ntohl(addr.s_addr) >> 24) == 127;
}

/* The authority a request names: of an absolute-form target, else the Host header. */
static span_t request_authority(http_request_t *req)
{
    span_t raw = http_req_raw_target(req), origin = http_req_target(req);
    if (raw.ptr == origin.ptr)
        return http_req_authority(req);
    const char *start = memchr(raw.ptr, '/', raw.len) + 2; /* after "scheme://" */
    size_t n = 0;
    while (start + n < raw.ptr + raw.len && start[n] != '/' && start[n] != '?')
        n++;
    return (span_t){start, n};
}

/* Whether this listener serves route: with --admin-listen the admin routes only on the admin
 * listener and the rest only on the public one; health, metrics, the OpenAPI document, the pages
 * and trending on both (the operator's page, served from the admin listener, shows trending). */
static bool listener_serves(const app_t *app, http_request_t *req, route_id_t id)
{
    if (!app->admin_listen || id == ROUTE_HEALTHZ || id == ROUTE_READYZ || id == ROUTE_METRICS || id == ROUTE_OPENAPI ||
        id == ROUTE_UI || id == ROUTE_TRENDING)
        return true;
    return route_is_admin(id) == (http_req_listener(req) == HTTP_LISTENER_ADMIN);
}

/* The checks every request passes before its route: framing, target, headers, Host, query. */
static bool request_or_reply(app_t *app, http_request_t *req, const route_t *route)
{
    if (!http_req_framing_ok(req)) {
        http_req_close_connection(req); /* what follows on this connection cannot be trusted */
        reply_problem(req, 400, "invalid-framing",
                      "Content-Length given twice with different values, Transfer-Encoding given twice, or both; "
                      "the connection is closed");
        return false;
    }
    if (http_req_raw_target(req).len > TARGET_MAX_BYTES) {
        reply_problem(req, 414, "uri-too-long", "request targets are at most 8192 bytes");
        return false;
    }
    if (http_req_header_bytes(req) > app->max_header_bytes) {
        reply_problem(req, 431, "headers-too-large", "the request's headers are larger than --max-header-size");
        return false;
    }
    if (app->dev_mode && !host_is_loopback(request_authority(req))) {
        reply_problem(req, 403, "forbidden",
                      "development mode answers only requests whose Host is localhost, 127.x.y.z or [::1]");
        return false;
    }
    http_client_t client;
    http_client_of(atomic_load(&app->client_rules), req, &client);
    if (client.forwarded)
        atomic_fetch_add_explicit(&app->forwarded, 1, memory_order_relaxed);
    if (client.invalid)
        atomic_fetch_add_explicit(&app->forwarded_invalid, 1, memory_order_relaxed);
    /* X-User-Id is anyone's to write: a proxy in front (one that rewrites Host, say) must not carry it
     * in from beyond this machine */
    if (app->dev_mode && client.known && !forwarded_is_loopback(client.addr)) {
        reply_problem(req, 403, "forbidden",
                      "development mode answers only clients on this machine; this one came through a proxy from "
                      "elsewhere");
        return false;
    }
    span_t name;
    if (route_query_repeats(route->query, &name)) {
        char detail[160];
        snprintf(detail, sizeof detail, "the query parameter %.*s is given more than once",
                 (int)(name.len > 64 ? 64 : name.len), name.ptr);
        reply_problem(req, 400, "invalid-parameter", detail);
        return false;
    }
    return true;
}

bool app_admits_large_body(void *arg, const http_head_t *head)
{
    app_t *app = arg;
    route_t route;
    route_match(head->target, &route);
    if (!span_eq_str(head->method, "POST") || (route.id != ROUTE_IMPORT && route.id != ROUTE_RECOUNT))
        return false;
    span_t authorization = {0}, user = {0};
    size_t n_authorization = 0, n_user = 0;
    for (size_t i = 0; i < head->nheaders; i++) {
        span_t name = head->names[i];
        if (name.len == 13 && strncasecmp(name.ptr, "authorization", 13) == 0 && n_authorization++ == 0)
            authorization = head->values[i];
        else if (name.len == 9 && strncasecmp(name.ptr, "x-user-id", 9) == 0 && n_user++ == 0)
            user = head->values[i];
    }
    return auth_head_is_admin(app, authorization, n_authorization, user, n_user);
}

void app_handle(void *arg, http_request_t *req)
{
    app_t *app = arg;
    route_t route;
    span_t method = http_req_method(req);
    route_match(http_req_target(req), &route);
    if (!request_or_reply(app, req, &route))
        return;
    if (route.id == ROUTE_NOT_FOUND || !listener_serves(app, req, route.id)) {
        reply_problem(req, 404, "not-found", "no such route");
        return;
    }
    if (route_is_admin(route.id))
        http_req_close_connection(req); /* the next admin request is admitted afresh (server.c) */
    if (span_eq_str(method, "OPTIONS")) {
        reply_options(app, req, route.id);
        return;
    }
    if (!route_allows(route.id, method)) {
        reply_problem_with(req, 405, "method-not-allowed", "this route does not take that method",
                           (problem_headers_t){.allow = route_allow(route.id)});
        return;
    }
    bool read = span_eq_str(method, "GET") || span_eq_str(method, "HEAD");
    switch (route.id) {
    case ROUTE_HEALTHZ:
        reply_health(req, true);
        return;
    case ROUTE_READYZ:
        reply_ready(app, req);
        return;
    case ROUTE_ITEMS:
        items_get_many(app, req, route.query);
        return;
    case ROUTE_ITEM:
        items_get_one(app, req, route.item);
        return;
    case ROUTE_VIEWER:
        items_get_viewer(app, req, route.query);
        return;
    case ROUTE_REACTION:
        if (read)
            items_get_reaction(app, req, route.item);
        else
            items_write(app, req, route.item, ITEM_ACTION_REACTION, route.kind);
        return;
    case ROUTE_TOGGLE:
        items_write(app, req, route.item, ITEM_ACTION_TOGGLE, route.kind);
        return;
    case ROUTE_KIND:
        items_write(app, req, route.item, ITEM_ACTION_KIND, route.kind);
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
        if (!span_eq_str(http_req_method(req), "DELETE")) {
            voids_admin_get(app, req, route.item);
            return;
        }
        admin_clear(app, req, route.item, true);
        return;
    case ROUTE_ADMIN_ITEM:
        admin_clear(app, req, route.item, false);
        return;
    case ROUTE_USER_VOID:
    case ROUTE_USER_RESTORE:
        voids_admin_change(app, req, route.item, route.id == ROUTE_USER_RESTORE);
        return;
    case ROUTE_WEBHOOKS:
        webhooks_admin_collection(app, req);
        return;
    case ROUTE_WEBHOOK:
        webhooks_admin_one(app, req, route.item, WEBHOOKS_ADMIN_DELETE);
        return;
    case ROUTE_WEBHOOK_RESUME:
        webhooks_admin_one(app, req, route.item, WEBHOOKS_ADMIN_RESUME);
        return;
    case ROUTE_WEBHOOK_SECRET:
        webhooks_admin_one(app, req, route.item, WEBHOOKS_ADMIN_SECRET);
        return;
    case ROUTE_LIVE:
        live_http_get(app, req, route.query);
        return;
    case ROUTE_OPENAPI:
        ui_openapi_get(app, req);
        return;
    case ROUTE_UI:
        ui_get(app, req, route.item);
        return;
    case ROUTE_ITEM_REACTIONS:
    case ROUTE_USER_REACTIONS:
        lists_get(app, req, route.item, route.query, route.id == ROUTE_USER_REACTIONS);
        return;
    case ROUTE_POLICIES:
        policies_admin_list(app, req);
        return;
    case ROUTE_POLICY:
        policies_admin_one(app, req, route.item);
        return;
    case ROUTE_USER_EXPORT:
        export_http_user(app, req, route.item);
        return;
    case ROUTE_ADMIN_EXPORT:
        export_http_admin(app, req);
        return;
    case ROUTE_NOT_FOUND:
    case ROUTE_COUNT:
        break;
    }
    reply_problem(req, 404, "not-found", "no such route");
}
