/* test_lists.c — the lists' pure parts: net changes of a pair, their map, and page cursors. */
#include <string.h>

#include "core/listchange.h"
#include "core/listcursor.h"
#include "unit.h"

static void test_change(void)
{
    list_change_t c;
    list_change_init(&c);
    list_change_add(&c, KINDSET_EMPTY, kindset_of(1), 5, 500); /* like */
    CHECK(c.set == kindset_of(1) && c.joined == kindset_of(1) && c.seq == 5 && c.kind_seq[1] == 5);
    list_change_add(&c, kindset_of(1), kindset_of(1) | kindset_of(2), 7, 700); /* + love: like stays at 5 */
    CHECK(c.seq == 7 && c.at_ms == 700 && c.kind_seq[1] == 5 && c.kind_seq[2] == 7 && c.kind_at[2] == 700);
    list_change_add(&c, kindset_of(1) | kindset_of(2), kindset_of(2), 9, 900); /* like leaves */
    CHECK(c.set == kindset_of(2) && c.joined == kindset_of(2) && c.kind_seq[2] == 7);
    list_change_add(&c, kindset_of(2), KINDSET_EMPTY, 11, 1100); /* cleared: nothing joined remains */
    CHECK(c.set == KINDSET_EMPTY && c.joined == KINDSET_EMPTY && c.seq == 11);

    /* a kind held since before the run did not join: its position does not move */
    list_change_init(&c);
    list_change_add(&c, kindset_of(1), kindset_of(1) | kindset_of(3), 20, 2000);
    CHECK(c.joined == kindset_of(3) && c.set == (kindset_of(1) | kindset_of(3)));

    /* merging two runs equals adding all of them to one */
    list_change_t a, b, all;
    list_change_init(&a), list_change_init(&b), list_change_init(&all);
    list_change_add(&a, KINDSET_EMPTY, kindset_of(1), 1, 10);
    list_change_add(&all, KINDSET_EMPTY, kindset_of(1), 1, 10);
    list_change_add(&b, kindset_of(1), kindset_of(1) | kindset_of(2), 2, 20);
    list_change_add(&all, kindset_of(1), kindset_of(1) | kindset_of(2), 2, 20);
    list_change_add(&b, kindset_of(1) | kindset_of(2), kindset_of(2) | kindset_of(4), 3, 30);
    list_change_add(&all, kindset_of(1) | kindset_of(2), kindset_of(2) | kindset_of(4), 3, 30);
    list_change_merge(&a, &b);
    CHECK(a.set == all.set && a.joined == all.joined && a.seq == all.seq && a.at_ms == all.at_ms);
    for (int k = 1; k <= KINDS_MAX; k++)
        if (kindset_has(all.joined, k))
            CHECK(a.kind_seq[k] == all.kind_seq[k] && a.kind_at[k] == all.kind_at[k]);
    list_change_t fresh;
    list_change_init(&fresh);
    list_change_merge(&fresh, &all); /* a new entry merged with c is c */
    CHECK(fresh.set == all.set && fresh.joined == all.joined && fresh.seq == all.seq);
}

static void test_map(void)
{
    listmap_t m = {0};
    char item[16], user[16];
    for (int i = 0; i < 300; i++) {
        snprintf(item, sizeof item, "i%d", i % 17);
        snprintf(user, sizeof user, "u%d", i);
        listmap_entry_t *e = listmap_get(&m, span_of(item), span_of(user));
        CHECK(e != NULL);
        if (e)
            list_change_add(&e->change, KINDSET_EMPTY, kindset_of(1), (uint64_t)i + 1, 0);
    }
    CHECK(m.count == 300);
    listmap_entry_t *e = listmap_find(&m, SPAN_LIT("i3"), SPAN_LIT("u3"));
    CHECK(e && e->change.seq == 4);
    CHECK(listmap_find(&m, SPAN_LIT("i3"), SPAN_LIT("u4")) == NULL);
    CHECK(listmap_find(&m, SPAN_LIT("i"), SPAN_LIT("3u3")) == NULL); /* the pair, not the concatenation */
    CHECK(listmap_get(&m, SPAN_LIT("i3"), SPAN_LIT("u3")) == e && m.count == 300);
    char big[ID_MAX_LEN + 2];
    memset(big, 'x', sizeof big);
    CHECK(listmap_get(&m, (span_t){big, sizeof big}, SPAN_LIT("u")) == NULL);
    listmap_free(&m);
    CHECK(listmap_find(&m, SPAN_LIT("i3"), SPAN_LIT("u3")) == NULL);
}

static void test_cursor(void)
{
    char buf[LIST_CURSOR_MAX];
    uint64_t seq;
    span_t name;
    size_t n = list_cursor_format(buf, 8812, SPAN_LIT("u7.a:b"));
    CHECK(n == strlen("8812.u7.a:b") && strcmp(buf, "8812.u7.a:b") == 0);
    CHECK(list_cursor_parse((span_t){buf, n}, &seq, &name) == 0 && seq == 8812 && span_eq_str(name, "u7.a:b"));
    CHECK(list_cursor_parse(SPAN_LIT("0.x"), &seq, &name) == 0 && seq == 0);
    n = list_cursor_format(buf, UINT64_MAX, SPAN_LIT("u"));
    CHECK(list_cursor_parse((span_t){buf, n}, &seq, &name) == 0 && seq == UINT64_MAX);
    const char *bad[] = {"", "5", "5.", ".u", "x.u", "05.u", "-1.u", "5.u/v", "5.%41", "18446744073709551616.u", "5.."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(list_cursor_parse(span_of(bad[i]), &seq, &name) != 0);
}

void test_list_change(void)
{
    test_change();
    test_map();
    test_cursor();
}
