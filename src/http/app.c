/* app.c — request dispatch: route, method, then the route's handler; health and readiness. */
#include "http/app.h"

#include <stdlib.h>

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

void reply_json(http_request_t *req, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        reply_problem(req, 500, "internal", "out of memory");
        return;
    }
    answer_t a = {0};
    answer_set_body(&a, status, ANSWER_JSON, text, strlen(text));
    http_respond(req, &a);
    answer_free(&a);
}

static void reply_health(http_request_t *req, bool ok)
{
    reply_json(req, ok ? 200 : 503, json_pack("{s:s}", "status", ok ? "ok" : "unavailable"));
}

void app_observe(void *arg, http_request_t *req, int status)
{
    app_t *app = arg;
    route_t route;
    route_match(http_req_target(req), &route);
    if (status >= 0 && status < STATUS_CODES && route.id < ROUTE_COUNT)
        atomic_fetch_add_explicit(&app->responses[route.id][status], 1, memory_order_relaxed);
}

void app_handle(void *arg, http_request_t *req)
{
    app_t *app = arg;
    route_t route;
    span_t method = http_req_method(req);
    route_match(http_req_target(req), &route);
    if (route.id == ROUTE_NOT_FOUND) {
        reply_problem(req, 404, "not-found", "no such route");
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
        reply_health(req, atomic_load(&app->ready) && atomic_load(&writer_stats(app->writer)->running));
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
