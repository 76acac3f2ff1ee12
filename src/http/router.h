/* router.h — maps a raw request target to a route. Pure: ids are cut out, not validated. */
#ifndef TALLY_HTTP_ROUTER_H
#define TALLY_HTTP_ROUTER_H

#include "core/span.h"

typedef enum {
    ROUTE_NOT_FOUND,
    ROUTE_HEALTHZ,        /* /healthz */
    ROUTE_READYZ,         /* /readyz */
    ROUTE_ITEMS,          /* /v1/items?ids=… */
    ROUTE_ITEM,           /* /v1/items/{item} */
    ROUTE_REACTION,       /* /v1/items/{item}/reaction */
    ROUTE_TOGGLE,         /* /v1/items/{item}/reaction:toggle */
    ROUTE_KIND,           /* /v1/items/{item}/{kind} */
    ROUTE_METRICS,        /* /metrics */
    ROUTE_CHANGES,        /* /v1/changes */
    ROUTE_RECOUNT,        /* /v1/admin/recount */
    ROUTE_IMPORT,         /* /v1/admin/import */
    ROUTE_TRENDING,       /* /v1/trending */
    ROUTE_HOT,            /* /v1/admin/hot */
    ROUTE_ADMIN_USER,     /* /v1/admin/users/{user} */
    ROUTE_ADMIN_ITEM,     /* /v1/admin/items/{item} */
    ROUTE_WEBHOOKS,       /* /v1/admin/webhooks */
    ROUTE_WEBHOOK,        /* /v1/admin/webhooks/{id} */
    ROUTE_WEBHOOK_RESUME, /* /v1/admin/webhooks/{id}/resume */
    ROUTE_WEBHOOK_SECRET, /* /v1/admin/webhooks/{id}/secret */
    ROUTE_LIVE,           /* /v1/live?ids=… (server-sent events) */
    ROUTE_OPENAPI,        /* /v1/openapi.json */
    ROUTE_UI,             /* /ui/{file}: the static files (the whole path in item) */
    ROUTE_ITEM_REACTIONS, /* /v1/items/{item}/reactions: who reacted */
    ROUTE_USER_REACTIONS, /* /v1/users/{user}/reactions: a user's reactions */
    ROUTE_VIEWER,         /* /v1/viewer?ids=…: the viewer's own part of several items */
    ROUTE_POLICIES,       /* /v1/admin/policies */
    ROUTE_POLICY,         /* /v1/admin/policies/{target} (the target in item) */
    ROUTE_USER_VOID,      /* /v1/admin/users/{user}/void (the user in item) */
    ROUTE_USER_RESTORE,   /* /v1/admin/users/{user}/restore (the user in item) */
    ROUTE_USER_EXPORT,    /* /v1/users/{user}/export: a user's export (NDJSON, streamed) */
    ROUTE_ADMIN_EXPORT,   /* /v1/admin/export: the whole store as import lines (NDJSON, streamed) */
    ROUTE_COUNT           /* number of routes, for per-route tables */
} route_id_t;

/* A short stable name for metrics labels ("item", "reaction", …). */
const char *route_name(route_id_t id);

typedef struct {
    route_id_t id;
    span_t item;  /* raw segment, for the item routes (the user of ROUTE_ADMIN_USER, ROUTE_USER_REACTIONS and
                     ROUTE_USER_EXPORT, a  webhook's id, the path of ROUTE_UI) */
    span_t kind;  /* raw segment, for ROUTE_KIND */
    span_t query; /* after '?', without it */
} route_t;

/* Matches target (path and query, as sent). Always fills out; id ROUTE_NOT_FOUND when no route. */
void route_match(span_t target, route_t *out);

/* The methods a route accepts, for the Allow header ("GET, HEAD"). */
const char *route_allow(route_id_t id);

bool route_allows(route_id_t id, span_t method);

/* The origin form of a request target: an absolute-form target ("http://host:8080/path?q", RFC
 * 9112 §3.2.2; scheme case-insensitive) becomes "/path?q" ("/" when it has no path); any other
 * target is returned as it is. */
span_t route_origin_form(span_t target);

/* True when a parameter name occurs more than once in query ("ids=a&ids=b"); *name is then that
 * name. Names are compared as sent (raw bytes). */
bool route_query_repeats(span_t query, span_t *name);

/* Admin routes: served by the admin listener when there is one (and not by the public one). */
bool route_is_admin(route_id_t id);

#endif
