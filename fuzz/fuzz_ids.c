/* fuzz_ids.c — libFuzzer target for id_valid (core/ids.h): the id alphabet and length of API.md § Words. */
#include <stdbool.h>
#include <stdint.h>

#include "core/ids.h"
#include "fuzz.h"
#include "http/router.h"

#define PATH_MAX_LEN (ID_MAX_LEN + 64) /* room for the longest prefix and suffix below */

static bool id_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || fuzz_is_digit(c) || (c && strchr("._:~-", c));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    span_t id = {(const char *)data, size};
    bool valid = id_valid(id);

    bool want = size >= 1 && size <= ID_MAX_LEN && !span_eq_str(id, ".") && !span_eq_str(id, "..");
    for (size_t i = 0; want && i < size; i++)
        want = id_char(data[i]);
    FUZZ_ASSERT(valid == want);
    if (!valid)
        return 0;

    /* A valid id needs no escaping in a path: the router cuts it back out whole, on every id route. */
    static const struct {
        const char *prefix, *suffix;
        route_id_t id;
    } routes[] = {
        {"/v1/items/", "", ROUTE_ITEM},
        {"/v1/items/", "/reaction", ROUTE_REACTION},
        {"/v1/items/", "/reaction:toggle", ROUTE_TOGGLE},
        {"/v1/items/", "/like", ROUTE_KIND},
        {"/v1/admin/users/", "", ROUTE_ADMIN_USER},
        {"/v1/admin/items/", "", ROUTE_ADMIN_ITEM},
    };
    char path[PATH_MAX_LEN];
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int n = snprintf(path, sizeof path, "%s%.*s%s?x=1", routes[i].prefix, (int)size, (const char *)data,
                         routes[i].suffix);
        FUZZ_ASSERT(n > 0 && (size_t)n < sizeof path);
        route_t r;
        route_match((span_t){path, (size_t)n}, &r);
        FUZZ_ASSERT(r.id == routes[i].id);
        FUZZ_ASSERT(span_eq(r.item, id));
        FUZZ_ASSERT(span_eq_str(r.query, "x=1"));
    }
    return 0;
}
