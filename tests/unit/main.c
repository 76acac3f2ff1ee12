/* main.c — runs every unit suite and prints the totals. */
#include <stdbool.h>
#include <string.h>

#include "unit.h"

int unit_passed, unit_failed;

/* Allocation failures are tested (a table too large to allocate): the sanitizer's allocator then
 * returns NULL, as malloc does, instead of stopping the run. ASAN_OPTIONS may still override it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/* With arguments, only the suites they name (tests/pg/seam.py runs "seam" on PostgreSQL). */
int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*run)(void);
    } suites[] = {
        {"ids", test_ids},
        {"csv", test_csv},
        {"kinds", test_kinds},
        {"reaction", test_reaction},
        {"parse", test_parse},
        {"fingerprint", test_fingerprint},
        {"router", test_router},
        {"router_admin", test_router_admin},
        {"openapi", test_openapi},
        {"router_lists", test_router_lists},
        {"list_change", test_list_change},
        {"answer", test_answer},
        {"store", test_store},
        {"seam", test_seam},
        {"jwt", test_jwt},
        {"idp", test_idp},
        {"itemmap", test_itemmap},
        {"histogram", test_histogram},
        {"spacesaving", test_spacesaving},
        {"itemjson", test_itemjson},
        {"changejson", test_changejson},
        {"iso_time", test_iso_time},
        {"textbuf", test_textbuf},
        {"pairfilter", test_pairfilter},
        {"ratelimit", test_ratelimit},
        {"conf", test_conf},
        {"trending", test_trending},
        {"webhooks", test_webhooks},
        {"live", test_live},
        {"forwarded", test_forwarded},
        {"etag", test_etag},
        {"policy", test_policy},
        {"features", test_features},
        {"shardmap", test_shardmap},
        {"userfold", test_userfold},
        {"shards", test_shards},
        {"claims", test_key_claims},
        {"feedmerge", test_feedmerge},
    };
    int suites_passed = 0, suites_failed = 0;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        bool named = argc < 2;
        for (int a = 1; a < argc; a++)
            named |= strcmp(argv[a], suites[i].name) == 0;
        if (!named)
            continue;
        int before = unit_failed;
        suites[i].run();
        bool ok = unit_failed == before;
        printf("%-12s %s\n", suites[i].name, ok ? "ok" : "FAIL");
        ok ? suites_passed++ : suites_failed++;
    }
    /* Suites are the unit of the count; checks are shown beside them. */
    printf("checks: %d passed, %d failed\n", unit_passed, unit_failed);
    printf("unit: %d passed, %d failed\n", suites_passed, suites_failed);
    return unit_failed ? 1 : 0;
}
