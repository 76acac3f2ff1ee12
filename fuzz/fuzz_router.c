/* fuzz_router.c — libFuzzer target for route_match and route_allows (http/router.h), checked against
 * the route table of API.md. Input: "METHOD TARGET", as on a request line; without a space, a GET. */
#include <stdbool.h>
#include <stdint.h>

#include "fuzz.h"
#include "http/router.h"

#define ITEMS_PATH "/v1/items"

/* The methods API.md gives each route ("" for none). */
static const char *want_allow(route_id_t id)
{
    switch (id) {
    case ROUTE_HEALTHZ:
    case ROUTE_READYZ:
    case ROUTE_ITEMS:
    case ROUTE_ITEM:
        return "GET HEAD";
    case ROUTE_REACTION:
        return "GET HEAD PUT DELETE";
    case ROUTE_TOGGLE:
        return "POST";
    case ROUTE_KIND:
        return "PUT DELETE";
    case ROUTE_NOT_FOUND:
        break;
    }
    return "";
}

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
    size_t prefix = strlen(ITEMS_PATH);
    if (span_eq_str(path, "/healthz"))
        r.id = ROUTE_HEALTHZ;
    else if (span_eq_str(path, "/readyz"))
        r.id = ROUTE_READYZ;
    else if (span_eq_str(path, ITEMS_PATH))
        r.id = ROUTE_ITEMS;
    else if (path.len > prefix && memcmp(path.ptr, ITEMS_PATH "/", prefix + 1) == 0) {
        span_t rest = {path.ptr + prefix + 1, path.len - prefix - 1};
        const char *slash = memchr(rest.ptr, '/', rest.len);
        if (!slash) {
            r.id = ROUTE_ITEM;
            r.item = rest;
            return r;
        }
        span_t item = {rest.ptr, (size_t)(slash - rest.ptr)};
        span_t action = {slash + 1, rest.len - item.len - 1};
        if (memchr(action.ptr, '/', action.len) || action.len == 0)
            return r;
        r.item = item;
        if (span_eq_str(action, "reaction"))
            r.id = ROUTE_REACTION;
        else if (span_eq_str(action, "reaction:toggle"))
            r.id = ROUTE_TOGGLE;
        else {
            r.id = ROUTE_KIND;
            r.kind = action;
        }
    }
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    span_t all = {(const char *)data, size};
    const char *space = memchr(data, ' ', size);
    span_t method = space ? (span_t){all.ptr, (size_t)(space - all.ptr)} : SPAN_LIT("GET");
    span_t target = space ? (span_t){space + 1, size - method.len - 1} : all;

    route_t r;
    memset(&r, 0x55, sizeof r);
    route_match(target, &r);
    FUZZ_ASSERT(r.id >= ROUTE_NOT_FOUND && r.id <= ROUTE_KIND);
    FUZZ_ASSERT(fuzz_span_within(r.item, target.ptr, target.len));
    FUZZ_ASSERT(fuzz_span_within(r.kind, target.ptr, target.len));
    FUZZ_ASSERT(fuzz_span_within(r.query, target.ptr, target.len));

    /* The query is everything after the first '?', and never part of the path. */
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
    if (r.id >= ROUTE_ITEM) {
        FUZZ_ASSERT(span_eq(r.item, want.item));
        FUZZ_ASSERT(r.item.len == 0 || !memchr(r.item.ptr, '/', r.item.len));
    }
    if (r.id == ROUTE_KIND) {
        FUZZ_ASSERT(r.kind.len >= 1 && span_eq(r.kind, want.kind));
        FUZZ_ASSERT(!memchr(r.kind.ptr, '/', r.kind.len));
    }

    /* Allow lists what the route takes, and route_allows agrees with it. */
    FUZZ_ASSERT(route_allow(r.id) != NULL);
    FUZZ_ASSERT(route_allows(r.id, method) == has_word(want_allow(r.id), method));
    for (route_id_t id = ROUTE_NOT_FOUND; id <= ROUTE_KIND; id++)
        FUZZ_ASSERT(route_allows(id, method) == has_word(want_allow(id), method));
    return 0;
}
