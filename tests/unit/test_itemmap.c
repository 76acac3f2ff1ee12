/* test_itemmap.c — the item map (core/itemmap.h). */
#include <stdio.h>

#include "core/itemmap.h"
#include "unit.h"

void test_itemmap(void)
{
    itemmap_t m = {0};
    char item[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(item, sizeof item, "i%d", i % 100);
        itemmap_entry_t *e = itemmap_get(&m, span_of(item));
        CHECK(e != NULL);
        if (e)
            e->deltas[1]++;
    }
    CHECK(m.count == 100);
    const itemmap_entry_t *e = itemmap_find(&m, SPAN_LIT("i7"));
    CHECK(e && e->deltas[1] == 10 && !itemmap_entry_is_zero(e));
    CHECK(itemmap_find(&m, SPAN_LIT("i100")) == NULL);
    itemmap_free(&m);
    CHECK(itemmap_find(&m, SPAN_LIT("i7")) == NULL);
}
