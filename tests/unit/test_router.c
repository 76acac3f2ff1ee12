/* test_router.c — the route table. */
#include <stdio.h>
#include <string.h>

#include "http/router.h"
#include "unit.h"

static route_t match(const char *target)
{
    route_t r;
    route_match(span_of(target), &r);
    return r;
}

void test_router(void)
{
    CHECK(match("/healthz").id == ROUTE_HEALTHZ);
    CHECK(match("/readyz").id == ROUTE_READYZ);
    CHECK(match("/healthz/x").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/items?ids=a,b").id == ROUTE_ITEMS);
    CHECK(span_eq_str(match("/v1/items?ids=a,b").query, "ids=a,b"));
    route_t r = match("/v1/items/v1");
    CHECK(r.id == ROUTE_ITEM && span_eq_str(r.item, "v1"));
    r = match("/v1/items/v1?x=1");
    CHECK(r.id == ROUTE_ITEM && span_eq_str(r.item, "v1") && span_eq_str(r.query, "x=1"));
    CHECK(match("/v1/items/").id == ROUTE_ITEM && match("/v1/items/").item.len == 0);
    r = match("/v1/items/v1/reaction");
    CHECK(r.id == ROUTE_REACTION && span_eq_str(r.item, "v1"));
    CHECK(match("/v1/items/v1/reaction:toggle").id == ROUTE_TOGGLE);
    r = match("/v1/items/a%20b/like");
    CHECK(r.id == ROUTE_KIND && span_eq_str(r.item, "a%20b") && span_eq_str(r.kind, "like"));
    CHECK(match("/v1/items/v1/like/x").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/items/v1/").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/itemsx").id == ROUTE_NOT_FOUND);
    CHECK(match("/v2/items/v1").id == ROUTE_NOT_FOUND);
    CHECK(match("").id == ROUTE_NOT_FOUND);
    CHECK(match("*").id == ROUTE_NOT_FOUND);
    CHECK(route_allows(ROUTE_REACTION, SPAN_LIT("PUT")) && route_allows(ROUTE_REACTION, SPAN_LIT("DELETE")));
    CHECK(route_allows(ROUTE_REACTION, SPAN_LIT("GET")) && !route_allows(ROUTE_REACTION, SPAN_LIT("POST")));
    CHECK(route_allows(ROUTE_TOGGLE, SPAN_LIT("POST")) && !route_allows(ROUTE_TOGGLE, SPAN_LIT("PUT")));
    CHECK(!route_allows(ROUTE_KIND, SPAN_LIT("GET")) && !route_allows(ROUTE_ITEM, SPAN_LIT("PUT")));
    CHECK(!route_allows(ROUTE_ITEM, SPAN_LIT("GE")) && !route_allows(ROUTE_ITEM, SPAN_LIT("GETX")));
    /* HEAD wherever GET, the live stream included; never where GET is not */
    int gets = 0;
    for (int id = ROUTE_NOT_FOUND + 1; id < ROUTE_COUNT; id++) {
        bool get = route_allows(id, SPAN_LIT("GET"));
        gets += get;
        if (get != route_allows(id, SPAN_LIT("HEAD")))
            fprintf(stderr, "route %s: Allow \"%s\" has GET without HEAD or HEAD without GET\n", route_name(id),
                    route_allow(id));
        CHECK(get == route_allows(id, SPAN_LIT("HEAD")));
    }
    CHECK(gets > 10 && route_allows(ROUTE_LIVE, SPAN_LIT("HEAD")));
}

void test_router_admin(void)
{
    CHECK(match("/metrics").id == ROUTE_METRICS);
    CHECK(match("/v1/changes?after=3").id == ROUTE_CHANGES);
    CHECK(span_eq_str(match("/v1/changes?after=3").query, "after=3"));
    CHECK(match("/v1/admin/recount").id == ROUTE_RECOUNT);
    CHECK(route_allows(ROUTE_RECOUNT, SPAN_LIT("POST")) && !route_allows(ROUTE_RECOUNT, SPAN_LIT("GET")));
    CHECK(strcmp(route_name(ROUTE_ITEM), "item") == 0 && strcmp(route_name(ROUTE_NOT_FOUND), "not_found") == 0);
}

void test_router_lists(void)
{
    route_t r = match("/v1/items/v1/reactions?limit=5");
    CHECK(r.id == ROUTE_ITEM_REACTIONS && span_eq_str(r.item, "v1") && span_eq_str(r.query, "limit=5"));
    r = match("/v1/users/u7/reactions?reaction=like");
    CHECK(r.id == ROUTE_USER_REACTIONS && span_eq_str(r.item, "u7") && span_eq_str(r.query, "reaction=like"));
    CHECK(match("/v1/users/u7").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/users/u7/reactions/x").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/users/u7/reaction").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/users/").id == ROUTE_NOT_FOUND);
    CHECK(match("/v1/items/v1/reactions/x").id == ROUTE_NOT_FOUND);
    CHECK(route_allows(ROUTE_ITEM_REACTIONS, SPAN_LIT("GET")) && !route_allows(ROUTE_ITEM_REACTIONS, SPAN_LIT("PUT")));
    CHECK(route_allows(ROUTE_USER_REACTIONS, SPAN_LIT("HEAD")) &&
          !route_allows(ROUTE_USER_REACTIONS, SPAN_LIT("DELETE")));
    CHECK(!route_is_admin(ROUTE_ITEM_REACTIONS) && !route_is_admin(ROUTE_USER_REACTIONS));
    CHECK(strcmp(route_name(ROUTE_USER_REACTIONS), "user_reactions") == 0);
}
