/* fuzz_ids.c — libFuzzer target for id_valid (core/ids.h): the id alphabet and length of API.md § Words. */
#include <stdbool.h>
#include <stdint.h>

#include "core/ids.h"
#include "fuzz.h"
#include "http/router.h"

#define ITEM_PATH_PREFIX "/v1/items/"

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

    /* A valid id needs no escaping in a path: the router cuts it back out whole, on every item route. */
    static const char *const suffixes[] = {"", "/reaction", "/reaction:toggle", "/like"};
    static const route_id_t routes[] = {ROUTE_ITEM, ROUTE_REACTION, ROUTE_TOGGLE, ROUTE_KIND};
    char path[sizeof ITEM_PATH_PREFIX + ID_MAX_LEN + sizeof "/reaction:toggle?x=1"];
    for (size_t s = 0; s < sizeof suffixes / sizeof suffixes[0]; s++) {
        int n =
            snprintf(path, sizeof path, "%s%.*s%s?x=1", ITEM_PATH_PREFIX, (int)size, (const char *)data, suffixes[s]);
        FUZZ_ASSERT(n > 0 && (size_t)n < sizeof path);
        route_t r;
        route_match((span_t){path, (size_t)n}, &r);
        FUZZ_ASSERT(r.id == routes[s]);
        FUZZ_ASSERT(span_eq(r.item, id));
        FUZZ_ASSERT(span_eq_str(r.query, "x=1"));
    }
    return 0;
}
