/* fuzz_router.c — libFuzzer target for route_match and route_allows (http/router.h), checked against
 * the route table of API.md. Input: "METHOD TARGET", as on a request line; without a space, a GET. */
#include <stdbool.h>
#include <stdint.h>

#include "fuzz.h"
#include "http/router.h"

#define ITEMS_PATH "/v1/items"

/* API.md's routes, written out again here as the reference: one row per route_id_t, checked below. */

static const struct {
    route_id_t id;
    const char *path;    /* the whole path, for the fixed routes */
    const char *prefix;  /* the path before one id segment, for the admin id routes */
    const char *methods; /* space-separated */
} spec[] = {
    {ROUTE_NOT_FOUND, NULL, NULL, ""},
    {ROUTE_HEALTHZ, "/healthz", NULL, "GET HEAD"},
    {ROUTE_READYZ, "/readyz", NULL, "GET HEAD"},
    {ROUTE_ITEMS, ITEMS_PATH, NULL, "GET HEAD"},
    {ROUTE_ITEM, NULL, NULL, "GET HEAD"},
    {ROUTE_REACTION, NULL, NULL, "GET HEAD PUT DELETE"},
    {ROUTE_TOGGLE, NULL, NULL, "POST"},
    {ROUTE_KIND, NULL, NULL, "PUT DELETE"},
    {ROUTE_METRICS, "/metrics", NULL, "GET HEAD"},
    {ROUTE_CHANGES, "/v1/changes", NULL, "GET HEAD"},
    {ROUTE_RECOUNT, "/v1/admin/recount", NULL, "POST"},
    {ROUTE_IMPORT, "/v1/admin/import", NULL, "POST"},
    {ROUTE_TRENDING, "/v1/trending", NULL, "GET HEAD"},
    {ROUTE_HOT, "/v1/admin/hot", NULL, "GET HEAD"},
    {ROUTE_ADMIN_USER, NULL, "/v1/admin/users/", "DELETE"},
    {ROUTE_ADMIN_ITEM, NULL, "/v1/admin/items/", "DELETE"},
    {ROUTE_WEBHOOKS, "/v1/admin/webhooks", NULL, "GET HEAD POST"},
    {ROUTE_WEBHOOK, NULL, NULL, "DELETE"},
    {ROUTE_WEBHOOK_RESUME, NULL, NULL, "POST"},
    {ROUTE_WEBHOOK_SECRET, NULL, NULL, "POST"},
    {ROUTE_LIVE, "/v1/live", NULL, "GET HEAD"},
    {ROUTE_OPENAPI, "/v1/openapi.json", NULL, "GET HEAD"},
    {ROUTE_UI, NULL, NULL, "GET HEAD"},
    {ROUTE_ITEM_REACTIONS, NULL, NULL, "GET HEAD"},
    {ROUTE_USER_REACTIONS, NULL, NULL, "GET HEAD"},
    {ROUTE_VIEWER, "/v1/viewer", NULL, "GET HEAD"},
    {ROUTE_POLICIES, "/v1/admin/policies", NULL, "GET HEAD"},
    {ROUTE_POLICY, NULL, "/v1/admin/policies/", "GET HEAD PUT DELETE"},
};
_Static_assert(sizeof spec / sizeof spec[0] == ROUTE_COUNT, "fuzz_router.c: a route was added; add its row to spec");

/* True when method is one of the space-separated words of words. */
static bool has_word(const char *words, span_t method)
{
    const char *p = words;
    while (*p) {
        size_t n = strcspn(p, " ");
        if (span_eq(method, (span_t){p, n}))
            return true;
        p += n + (p[n] == ' ');
    }
    return false;
}

/* A reference router over the path (the target before its first '?'). */
static route_t ref_route(span_t path)
{
    route_t r = {.id = ROUTE_NOT_FOUND};
    for (size_t i = 0; i < ROUTE_COUNT; i++)
        if (spec[i].path && span_eq_str(path, spec[i].path)) {
            r.id = spec[i].id;
            return r;
        }
    /* /v1/admin/webhooks/{id}, …/{id}/resume, …/{id}/secret */
    static const char webhooks[] = "/v1/admin/webhooks/";
    size_t wn = strlen(webhooks);
    if (path.len > wn && memcmp(path.ptr, webhooks, wn) == 0) {
        span_t rest = {path.ptr + wn, path.len - wn};
        const char *slash = memchr(rest.ptr, '/', rest.len);
        span_t id = {rest.ptr, slash ? (size_t)(slash - rest.ptr) : rest.len};
        span_t action = slash ? (span_t){slash + 1, rest.len - id.len - 1} : (span_t){0};
        if (id.len && !slash)
            r.id = ROUTE_WEBHOOK;
        else if (id.len && span_eq_str(action, "resume"))
            r.id = ROUTE_WEBHOOK_RESUME;
        else if (id.len && span_eq_str(action, "secret"))
            r.id = ROUTE_WEBHOOK_SECRET;
        if (r.id != ROUTE_NOT_FOUND) {
            r.item = id;
            return r;
        }
    }
    /* /ui/{file}: one segment after /ui/ (the whole path is the item) */
    if (path.len >= 4 && memcmp(path.ptr, "/ui/", 4) == 0 && !memchr(path.ptr + 4, '/', path.len - 4)) {
        r.id = ROUTE_UI;
        r.item = path;
        return r;
    }
    /* /v1/users/{user}/reactions */
    static const char users[] = "/v1/users/";
    size_t un = strlen(users);
    if (path.len > un && memcmp(path.ptr, users, un) == 0) {
        span_t rest = {path.ptr + un, path.len - un};
        const char *slash = memchr(rest.ptr, '/', rest.len);
        if (slash && span_eq_str((span_t){slash + 1, rest.len - (size_t)(slash - rest.ptr) - 1}, "reactions")) {
            r.id = ROUTE_USER_REACTIONS;
            r.item = (span_t){rest.ptr, (size_t)(slash - rest.ptr)};
        }
        return r;
    }
    for (size_t i = 0; i < ROUTE_COUNT; i++) {
        if (spec[i].path && span_eq_str(path, spec[i].path)) {
            r.id = spec[i].id;
            return r;
        }
        size_t n = spec[i].prefix ? strlen(spec[i].prefix) : 0;
        if (n && path.len >= n && memcmp(path.ptr, spec[i].prefix, n) == 0) {
            span_t id = {path.ptr + n, path.len - n};
            if (!memchr(id.ptr, '/', id.len)) {
                r.id = spec[i].id;
                r.item = id;
            }
            return r;
        }
    }
    size_t prefix = strlen(ITEMS_PATH "/");
    if (path.len < prefix || memcmp(path.ptr, ITEMS_PATH "/", prefix) != 0)
        return r;
    span_t rest = {path.ptr + prefix, path.len - prefix};
    const char *slash = memchr(rest.ptr, '/', rest.len);
    if (!slash) {
        r.id = ROUTE_ITEM;
        r.item = rest;
        return r;
    }
    span_t item = {rest.ptr, (size_t)(slash - rest.ptr)};
    span_t action = {slash + 1, rest.len - item.len - 1};
    if (action.len == 0 || memchr(action.ptr, '/', action.len))
        return r;
    r.item = item;
    if (span_eq_str(action, "reaction"))
        r.id = ROUTE_REACTION;
    else if (span_eq_str(action, "reactions"))
        r.id = ROUTE_ITEM_REACTIONS;
    else if (span_eq_str(action, "reaction:toggle"))
        r.id = ROUTE_TOGGLE;
    else {
        r.id = ROUTE_KIND;
        r.kind = action;
    }
    return r;
}

static void check_tables(void)
{
    for (int a = 0; a < ROUTE_COUNT; a++) {
        const char *name = route_name((route_id_t)a);
        FUZZ_ASSERT(name && name[0] != '\0'); /* a metrics label */
        for (int b = 0; b < a; b++)
            FUZZ_ASSERT(strcmp(name, route_name((route_id_t)b)) != 0);
        FUZZ_ASSERT(route_allow((route_id_t)a) != NULL);
        FUZZ_ASSERT(spec[a].id == (route_id_t)a); /* the rows are in route_id_t order, one each */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool tables_checked;
    if (!tables_checked) {
        check_tables();
        tables_checked = true;
    }
    span_t all = {(const char *)data, size};
    const char *space = memchr(data, ' ', size);
    span_t method = space ? (span_t){all.ptr, (size_t)(space - all.ptr)} : SPAN_LIT("GET");
    span_t target = space ? (span_t){space + 1, size - method.len - 1} : all;

    route_t r;
    memset(&r, 0x55, sizeof r);
    route_match(target, &r);
    FUZZ_ASSERT(r.id >= ROUTE_NOT_FOUND && r.id < ROUTE_COUNT);
    FUZZ_ASSERT(fuzz_span_within(r.item, target.ptr, target.len));
    FUZZ_ASSERT(fuzz_span_within(r.kind, target.ptr, target.len));
    FUZZ_ASSERT(fuzz_span_within(r.query, target.ptr, target.len));

    /* The query is everything after the first '?', and the ids come from the path before it. */
    const char *q = memchr(target.ptr, '?', target.len);
    span_t path = {target.ptr, q ? (size_t)(q - target.ptr) : target.len};
    if (q)
        FUZZ_ASSERT(r.query.len == target.len - path.len - 1 && (r.query.len == 0 || r.query.ptr == q + 1));
    else
        FUZZ_ASSERT(r.query.len == 0);
    FUZZ_ASSERT(fuzz_span_within(r.item, path.ptr, path.len));
    FUZZ_ASSERT(fuzz_span_within(r.kind, path.ptr, path.len));

    route_t want = ref_route(path);
    FUZZ_ASSERT(r.id == want.id);
    if (r.id == ROUTE_UI)
        FUZZ_ASSERT(span_eq(r.item, want.item));
    if (r.id == ROUTE_ITEM || r.id == ROUTE_REACTION || r.id == ROUTE_TOGGLE || r.id == ROUTE_KIND ||
        r.id == ROUTE_ADMIN_USER || r.id == ROUTE_ADMIN_ITEM || r.id == ROUTE_WEBHOOK || r.id == ROUTE_WEBHOOK_RESUME ||
        r.id == ROUTE_WEBHOOK_SECRET || r.id == ROUTE_ITEM_REACTIONS || r.id == ROUTE_USER_REACTIONS ||
        r.id == ROUTE_POLICY) {
        FUZZ_ASSERT(span_eq(r.item, want.item));
        FUZZ_ASSERT(r.item.len == 0 || !memchr(r.item.ptr, '/', r.item.len));
    }
    if (r.id == ROUTE_KIND) {
        FUZZ_ASSERT(r.kind.len >= 1 && span_eq(r.kind, want.kind));
        FUZZ_ASSERT(!memchr(r.kind.ptr, '/', r.kind.len));
    }

    /* The origin form is the target itself or a suffix of it starting with '/' (or the literal "/"). */
    span_t origin = route_origin_form(target);
    FUZZ_ASSERT(span_eq(origin, target) || span_eq_str(origin, "/") ||
                (fuzz_span_within(origin, target.ptr, target.len) && origin.len && origin.ptr[0] == '/' &&
                 origin.ptr + origin.len == target.ptr + target.len));

    /* A repeated name is one of the query's names, and names said to repeat occur twice. */
    span_t repeated;
    if (route_query_repeats(r.query, &repeated)) {
        FUZZ_ASSERT(repeated.len > 0 && fuzz_span_within(repeated, r.query.ptr, r.query.len));
        size_t seen = 0;
        for (size_t pos = 0; pos <= r.query.len;) {
            const char *amp = pos < r.query.len ? memchr(r.query.ptr + pos, '&', r.query.len - pos) : NULL;
            size_t n = amp ? (size_t)(amp - r.query.ptr - pos) : r.query.len - pos;
            const char *eq = n ? memchr(r.query.ptr + pos, '=', n) : NULL;
            span_t key = {r.query.ptr + pos, eq ? (size_t)(eq - r.query.ptr - pos) : n};
            seen += span_eq(key, repeated);
            pos += n + 1;
        }
        FUZZ_ASSERT(seen >= 2);
    }

    /* route_allows says yes exactly to the methods API.md gives the route. */
    for (size_t i = 0; i < ROUTE_COUNT; i++)
        FUZZ_ASSERT(route_allows(spec[i].id, method) == has_word(spec[i].methods, method));
    return 0;
}
