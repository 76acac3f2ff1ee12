/* test_ratelimit.c — the rate limiter (core/ratelimit.h). */

#include "core/ratelimit.h"
#include "unit.h"

void test_ratelimit(void)
{
    ratelimit_t *rl = (ratelimit_t *)1;
    CHECK(ratelimit_new((ratelimit_rule_t){0, 0}, 1024, &rl) == 0 && rl == NULL); /* off */
    CHECK(ratelimit_take(NULL, SPAN_LIT("u"), 0) == 0);
    CHECK(ratelimit_new((ratelimit_rule_t){1, 1}, 1024, &rl) == 0 && rl != NULL);
    CHECK(ratelimit_take(rl, SPAN_LIT("u"), 1000) == 0 && ratelimit_take(rl, SPAN_LIT("u"), 1000) >= 1);
    ratelimit_free(rl);
    rl = (ratelimit_t *)1;
    /* A table too large to allocate (the unit tests run with allocator_may_return_null). */
    CHECK(ratelimit_new((ratelimit_rule_t){1, 1}, SIZE_MAX / 2, &rl) == -1 && rl == NULL);
}
