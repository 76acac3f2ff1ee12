/* test_userfold.c — engine/userfold.h's pure parts: the checkpoint records of a user's list across
 * shards, and the changes it hands the store at position 0 (taken at commit). */
#include <string.h>

#include "core/listchange.h"
#include "engine/userfold.h"
#include "unit.h"

static void test_records(void)
{
    char key[USERFOLD_KEY_MAX];
    size_t n = userfold_key(key, 7), j = 99;
    uint64_t seq = 0;
    CHECK(n == strlen("cluster/userfold/7") && memcmp(key, "cluster/userfold/7", n) == 0);
    CHECK(userfold_record_parse((span_t){key, n}, SPAN_LIT("12345"), &j, &seq) == 0 && j == 7 && seq == 12345);
    n = userfold_key(key, SHARD_MAX - 1);
    CHECK(userfold_record_parse((span_t){key, n}, SPAN_LIT("0"), &j, &seq) == 0 && j == SHARD_MAX - 1 && seq == 0);
    CHECK(userfold_record_parse(SPAN_LIT("cluster/userfold/0"), SPAN_LIT("18446744073709551615"), &j, &seq) == 0 &&
          j == 0 && seq == UINT64_MAX);
    static const char *const bad_keys[] = {
        "cluster/userfold/",    /* no shard */
        "cluster/userfold/07",  /* a leading zero */
        "cluster/userfold/256", /* past SHARD_MAX - 1 */
        "cluster/userfold/1x",  /* not a number */
        "cluster/identity",     /* another record */
        "void/u/cluster/userfold/1",
    };
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++)
        CHECK(userfold_record_parse(span_of(bad_keys[i]), SPAN_LIT("1"), &j, &seq) == -1);
    static const char *const bad_values[] = {"", "01", "-1", "1 ", "18446744073709551616", "x"};
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++)
        CHECK(userfold_record_parse(SPAN_LIT("cluster/userfold/1"), span_of(bad_values[i]), &j, &seq) == -1);
}

/* A pair folded from another shard's log: every position it moves is 0 (the user's shard's, at
 * commit); kinds that stayed keep theirs (not in joined); at is the source's. */
static void test_changes_at_commit(void)
{
    list_change_t c;
    list_change_init(&c);
    list_change_add(&c, KINDSET_EMPTY, 1u << 1, 0, 1000);         /* none → {1} */
    list_change_add(&c, 1u << 1, (1u << 1) | (1u << 2), 0, 2000); /* {1} → {1,2} */
    CHECK(c.set == ((1u << 1) | (1u << 2)) && c.seq == 0 && c.at_ms == 2000);
    CHECK(c.joined == ((1u << 1) | (1u << 2)) && c.kind_seq[1] == 0 && c.kind_seq[2] == 0);
    CHECK(c.kind_at[1] == 1000 && c.kind_at[2] == 2000);
    list_change_add(&c, (1u << 1) | (1u << 2), KINDSET_EMPTY, 0, 3000); /* cleared: leaves every list */
    CHECK(c.set == KINDSET_EMPTY && c.joined == KINDSET_EMPTY);
}

void test_userfold(void)
{
    test_records();
    test_changes_at_commit();
}
