/* unit.h — a minimal test harness: CHECK records a pass or a failure with its place. */
#ifndef TALLY_TESTS_UNIT_H
#define TALLY_TESTS_UNIT_H

#include <stdio.h>

extern int unit_passed, unit_failed;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            unit_passed++;                                                                                             \
        } else {                                                                                                       \
            unit_failed++;                                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                            \
        }                                                                                                              \
    } while (0)

void test_ids(void);
void test_csv(void);
void test_kinds(void);
void test_reaction(void);
void test_parse(void);
void test_fingerprint(void);
void test_router(void);
void test_router_admin(void);
void test_router_lists(void);
void test_list_change(void);
void test_answer(void);
void test_store(void);
void test_seam(void);
void test_jwt(void);
void test_idp(void);
void test_itemmap(void);
void test_histogram(void);
void test_spacesaving(void);
void test_itemjson(void);
void test_changejson(void);
void test_iso_time(void);
void test_textbuf(void);
void test_pairfilter(void);
void test_ratelimit(void);
void test_conf(void);
void test_trending(void);
void test_webhooks(void);
void test_live(void);
void test_openapi(void);
void test_forwarded(void);
void test_etag(void);
void test_policy(void);
void test_features(void);
void test_shardmap(void);
void test_userfold(void);
void test_shards(void);
void test_key_claims(void);
void test_feedmerge(void);

#endif
