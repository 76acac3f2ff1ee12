/* router.c — the route table of API.md. */
#include "http/router.h"

#include <strings.h>

#define ITEMS_PREFIX "/v1/items"
#define UI_PREFIX "/ui/"
#define USERS_PREFIX "/v1/users/"
#define LIST_SEGMENT "reactions"

static const struct {
    route_id_t id;
    const char *name;
    const char *path; /* fixed paths only */
    const char *allow;
} route_methods[] = {
    {ROUTE_NOT_FOUND, "not_found", NULL, ""},
    {ROUTE_HEALTHZ, "healthz", "/healthz", "GET, HEAD"},
    {ROUTE_READYZ, "readyz", "/readyz", "GET, HEAD"},
    {ROUTE_ITEMS, "items", NULL, "GET, HEAD"},
    {ROUTE_ITEM, "item", NULL, "GET, HEAD"},
    {ROUTE_REACTION, "reaction", NULL, "GET, HEAD, PUT, DELETE"},
    {ROUTE_TOGGLE, "toggle", NULL, "POST"},
    {ROUTE_KIND, "kind", NULL, "PUT, DELETE"},
    {ROUTE_METRICS, "metrics", "/metrics", "GET, HEAD"},
    {ROUTE_CHANGES, "changes", "/v1/changes", "GET, HEAD"},
    {ROUTE_RECOUNT, "recount", "/v1/admin/recount", "POST"},
    {ROUTE_IMPORT, "import", "/v1/admin/import", "POST"},
    {ROUTE_TRENDING, "trending", "/v1/trending", "GET, HEAD"},
    {ROUTE_HOT, "hot", "/v1/admin/hot", "GET, HEAD"},
    {ROUTE_ADMIN_USER, "admin_user", NULL, "DELETE"},
    {ROUTE_ADMIN_ITEM, "admin_item", NULL, "DELETE"},
    {ROUTE_WEBHOOKS, "webhooks", "/v1/admin/webhooks", "GET, HEAD, POST"},
    {ROUTE_WEBHOOK, "webhook", NULL, "DELETE"},
    {ROUTE_WEBHOOK_RESUME, "webhook_resume", NULL, "POST"},
    {ROUTE_WEBHOOK_SECRET, "webhook_secret", NULL, "POST"},
    {ROUTE_LIVE, "live", "/v1/live", "GET, HEAD"},
    {ROUTE_OPENAPI, "openapi", "/v1/openapi.json", "GET, HEAD"},
    {ROUTE_UI, "ui", NULL, "GET, HEAD"},
    {ROUTE_ITEM_REACTIONS, "item_reactions", NULL, "GET, HEAD"},
    {ROUTE_USER_REACTIONS, "user_reactions", NULL, "GET, HEAD"},
    {ROUTE_VIEWER, "viewer", "/v1/viewer", "GET, HEAD"},
    {ROUTE_POLICIES, "policies", "/v1/admin/policies", "GET, HEAD"},
    {ROUTE_POLICY, "policy", NULL, "GET, HEAD, PUT, DELETE"},
};

#define WEBHOOKS_PREFIX "/v1/admin/webhooks/"

/* /v1/admin/webhooks/{id}[/resume|/secret]; false when path is not one. */
static bool match_webhook(span_t path, route_t *out)
{
    size_t n = strlen(WEBHOOKS_PREFIX);
    if (path.len <= n || memcmp(path.ptr, WEBHOOKS_PREFIX, n) != 0)
        return false;
    span_t rest = {path.ptr + n, path.len - n};
    const char *slash = memchr(rest.ptr, '/', rest.len);
    out->item = (span_t){rest.ptr, slash ? (size_t)(slash - rest.ptr) : rest.len};
    span_t action = slash ? (span_t){slash + 1, rest.len - out->item.len - 1} : (span_t){0};
    if (!slash)
        out->id = ROUTE_WEBHOOK;
    else if (span_eq_str(action, "resume"))
        out->id = ROUTE_WEBHOOK_RESUME;
    else if (span_eq_str(action, "secret"))
        out->id = ROUTE_WEBHOOK_SECRET;
    return out->item.len > 0 && out->id != ROUTE_NOT_FOUND;
}

const char *route_name(route_id_t id)
{
    for (size_t i = 0; i < sizeof route_methods / sizeof route_methods[0]; i++)
        if (route_methods[i].id == id)
            return route_methods[i].name;
    return "not_found";
}

const char *route_allow(route_id_t id)
{
    for (size_t i = 0; i < sizeof route_methods / sizeof route_methods[0]; i++)
        if (route_methods[i].id == id)
            return route_methods[i].allow;
    return "";
}

bool route_allows(route_id_t id, span_t method)
{
    const char *allow = route_allow(id);
    size_t pos = 0, n = strlen(allow);
    while (pos < n) {
        const char *comma = strchr(allow + pos, ',');
        size_t len = comma ? (size_t)(comma - allow - pos) : n - pos;
        if (span_eq(method, (span_t){allow + pos, len}))
            return true;
        pos += len + 2; /* ", " */
    }
    return false;
}

/* Cuts the next '/'-separated segment off *rest (which starts after a '/'). */
static span_t next_segment(span_t *rest, bool *more)
{
    const char *slash = rest->len ? memchr(rest->ptr, '/', rest->len) : NULL;
    span_t seg = {rest->ptr, slash ? (size_t)(slash - rest->ptr) : rest->len};
    *more = slash != NULL;
    if (slash)
        *rest = (span_t){slash + 1, rest->len - seg.len - 1};
    else
        *rest = (span_t){rest->ptr + rest->len, 0};
    return seg;
}

void route_match(span_t target, route_t *out)
{
    *out = (route_t){.id = ROUTE_NOT_FOUND};
    const char *q = target.len ? memchr(target.ptr, '?', target.len) : NULL;
    span_t path = {target.ptr, q ? (size_t)(q - target.ptr) : target.len};
    if (q)
        out->query = (span_t){q + 1, target.len - path.len - 1};
    for (size_t i = 0; i < sizeof route_methods / sizeof route_methods[0]; i++) {
        if (route_methods[i].path && span_eq_str(path, route_methods[i].path)) {
            out->id = route_methods[i].id;
            return;
        }
    }
    if (match_webhook(path, out))
        return;
    size_t ui_len = strlen(UI_PREFIX);
    if (path.len >= ui_len && memcmp(path.ptr, UI_PREFIX, ui_len) == 0 &&
        !memchr(path.ptr + ui_len, '/', path.len - ui_len)) {
        out->id = ROUTE_UI; /* which files exist is ui.c's to say */
        out->item = path;
        return;
    }
    out->id = ROUTE_NOT_FOUND;
    out->item = (span_t){0};
    static const struct {
        const char *prefix;
        route_id_t id;
    } admin_prefixes[] = {{"/v1/admin/users/", ROUTE_ADMIN_USER},
                          {"/v1/admin/items/", ROUTE_ADMIN_ITEM},
                          {"/v1/admin/policies/", ROUTE_POLICY}};
    for (size_t i = 0; i < sizeof admin_prefixes / sizeof admin_prefixes[0]; i++) {
        size_t n = strlen(admin_prefixes[i].prefix);
        if (path.len >= n && memcmp(path.ptr, admin_prefixes[i].prefix, n) == 0 &&
            !memchr(path.ptr + n, '/', path.len - n)) {
            out->id = admin_prefixes[i].id;
            out->item = (span_t){path.ptr + n, path.len - n};
            return;
        }
    }
    size_t users_len = strlen(USERS_PREFIX);
    if (path.len > users_len && memcmp(path.ptr, USERS_PREFIX, users_len) == 0) {
        span_t rest = {path.ptr + users_len, path.len - users_len};
        bool more;
        span_t user = next_segment(&rest, &more);
        if (more && span_eq_str(rest, LIST_SEGMENT)) {
            out->id = ROUTE_USER_REACTIONS;
            out->item = user;
        }
        return;
    }
    size_t prefix_len = strlen(ITEMS_PREFIX);
    if (path.len < prefix_len || memcmp(path.ptr, ITEMS_PREFIX, prefix_len) != 0)
        return;
    span_t rest = {path.ptr + prefix_len, path.len - prefix_len};
    if (rest.len == 0) {
        out->id = ROUTE_ITEMS;
        return;
    }
    if (rest.ptr[0] != '/')
        return;
    rest.ptr++;
    rest.len--;
    bool more;
    out->item = next_segment(&rest, &more);
    if (!more) {
        out->id = ROUTE_ITEM;
        return;
    }
    span_t action = next_segment(&rest, &more);
    if (more)
        return; /* deeper paths are not routes */
    if (span_eq_str(action, "reaction"))
        out->id = ROUTE_REACTION;
    else if (span_eq_str(action, LIST_SEGMENT))
        out->id = ROUTE_ITEM_REACTIONS;
    else if (span_eq_str(action, "reaction:toggle"))
        out->id = ROUTE_TOGGLE;
    else if (action.len > 0) {
        out->id = ROUTE_KIND;
        out->kind = action;
    }
}

span_t route_origin_form(span_t target)
{
    size_t scheme = 0;
    if (target.len >= 7 && strncasecmp(target.ptr, "http://", 7) == 0)
        scheme = 7;
    else if (target.len >= 8 && strncasecmp(target.ptr, "https://", 8) == 0)
        scheme = 8;
    if (scheme == 0)
        return target;
    for (size_t i = scheme; i < target.len; i++) {
        if (target.ptr[i] == '/')
            return (span_t){target.ptr + i, target.len - i};
        if (target.ptr[i] == '?')
            break; /* "http://host?q": the path is empty */
    }
    return SPAN_LIT("/");
}

bool route_query_repeats(span_t query, span_t *name)
{
    size_t pos = 0;
    while (pos < query.len) {
        const char *start = query.ptr + pos;
        const char *amp = memchr(start, '&', query.len - pos);
        size_t n = amp ? (size_t)(amp - start) : query.len - pos;
        const char *eq = memchr(start, '=', n);
        span_t key = {start, eq ? (size_t)(eq - start) : n};
        /* Compare with every later parameter: queries are short (the target is bounded). */
        size_t later = pos + n + 1;
        while (key.len && later < query.len) {
            const char *s2 = query.ptr + later;
            const char *amp2 = memchr(s2, '&', query.len - later);
            size_t n2 = amp2 ? (size_t)(amp2 - s2) : query.len - later;
            const char *eq2 = memchr(s2, '=', n2);
            span_t key2 = {s2, eq2 ? (size_t)(eq2 - s2) : n2};
            if (span_eq(key, key2)) {
                *name = key;
                return true;
            }
            later += n2 + 1;
        }
        pos += n + 1;
    }
    return false;
}

bool route_is_admin(route_id_t id)
{
    return id == ROUTE_CHANGES || id == ROUTE_RECOUNT || id == ROUTE_IMPORT || id == ROUTE_HOT ||
           id == ROUTE_ADMIN_USER || id == ROUTE_ADMIN_ITEM || id == ROUTE_WEBHOOKS || id == ROUTE_WEBHOOK ||
           id == ROUTE_WEBHOOK_RESUME || id == ROUTE_WEBHOOK_SECRET || id == ROUTE_POLICIES || id == ROUTE_POLICY;
}
