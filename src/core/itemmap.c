/* itemmap.c — open addressing over a growing array of entries. */
#include "core/itemmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/slotindex.h"

#define ITEMMAP_MIN 64

static uint64_t entry_hash(const void *entries, size_t i)
{
    const itemmap_entry_t *e = (const itemmap_entry_t *)entries + i;
    return hash_bytes(HASH_SEED, e->item, e->item_len);
}

static int itemmap_grow(itemmap_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : ITEMMAP_MIN;
    itemmap_entry_t *entries = realloc(m->entries, cap * sizeof *entries);
    if (!entries)
        return -1;
    m->entries = entries;
    if (slotindex_rebuild(&m->slots, &m->nslots, cap * 2, entries, m->count, entry_hash) != 0)
        return -1;
    m->cap = cap;
    return 0;
}

/* The slot holding item, or the empty slot where it would go. */
static size_t itemmap_slot(const itemmap_t *m, span_t item)
{
    size_t s = hash_bytes(HASH_SEED, item.ptr, item.len) & (m->nslots - 1);
    for (; m->slots[s]; s = (s + 1) & (m->nslots - 1)) {
        const itemmap_entry_t *e = &m->entries[m->slots[s] - 1];
        if (e->item_len == item.len && memcmp(e->item, item.ptr, item.len) == 0)
            break;
    }
    return s;
}

itemmap_entry_t *itemmap_find(const itemmap_t *m, span_t item)
{
    if (!m->nslots)
        return NULL;
    size_t s = itemmap_slot(m, item);
    return m->slots[s] ? &m->entries[m->slots[s] - 1] : NULL;
}

itemmap_entry_t *itemmap_get(itemmap_t *m, span_t item)
{
    if (item.len > ID_MAX_LEN)
        return NULL;
    if (m->count == m->cap && itemmap_grow(m) != 0)
        return NULL;
    size_t s = itemmap_slot(m, item);
    if (m->slots[s])
        return &m->entries[m->slots[s] - 1];
    itemmap_entry_t *e = &m->entries[m->count];
    memcpy(e->item, item.ptr, item.len);
    e->item_len = item.len;
    memset(e->deltas, 0, sizeof e->deltas);
    m->slots[s] = (uint32_t)(++m->count);
    return e;
}

bool itemmap_entry_is_zero(const itemmap_entry_t *e)
{
    for (int k = 0; k <= KINDS_MAX; k++)
        if (e->deltas[k] != 0)
            return false;
    return true;
}

void itemmap_clear(itemmap_t *m)
{
    m->count = 0;
    if (m->slots)
        memset(m->slots, 0, m->nslots * sizeof *m->slots);
}

void itemmap_free(itemmap_t *m)
{
    free(m->entries);
    free(m->slots);
    *m = (itemmap_t){0};
}
