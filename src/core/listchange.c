/* listchange.c — net changes of (item, user) pairs for the lists, and their map (open addressing). */
#include "core/listchange.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/slotindex.h"

#define LISTMAP_MIN 64

void list_change_init(list_change_t *c)
{
    memset(c, 0, sizeof *c);
}

void list_change_add(list_change_t *c, kindset_t from, kindset_t to, uint64_t seq, uint64_t at_ms)
{
    kindset_t joined_now = to & ~from;
    c->joined = (c->joined & to) | joined_now;
    for (kindset_t k = joined_now; k; k &= k - 1) {
        int code = __builtin_ctz(k);
        c->kind_seq[code] = seq;
        c->kind_at[code] = at_ms;
    }
    c->set = to;
    c->seq = seq;
    c->at_ms = at_ms;
}

void list_change_merge(list_change_t *c, const list_change_t *next)
{
    c->joined = (c->joined & next->set & ~next->joined) | next->joined;
    for (kindset_t k = next->joined; k; k &= k - 1) {
        int code = __builtin_ctz(k);
        c->kind_seq[code] = next->kind_seq[code];
        c->kind_at[code] = next->kind_at[code];
    }
    c->set = next->set;
    c->seq = next->seq;
    c->at_ms = next->at_ms;
}

static uint64_t pair_hash(span_t item, span_t user)
{
    return hash_bytes(hash_bytes(HASH_SEED, item.ptr, item.len), user.ptr, user.len);
}

static uint64_t entry_hash(const void *entries, size_t i)
{
    const listmap_entry_t *e = (const listmap_entry_t *)entries + i;
    return pair_hash((span_t){e->item, e->item_len}, (span_t){e->user, e->user_len});
}

static int listmap_grow(listmap_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : LISTMAP_MIN;
    listmap_entry_t *entries = realloc(m->entries, cap * sizeof *entries);
    if (!entries)
        return -1;
    m->entries = entries;
    if (slotindex_rebuild(&m->slots, &m->nslots, cap * 2, entries, m->count, entry_hash) != 0)
        return -1;
    m->cap = cap;
    return 0;
}

/* The slot holding (item, user), or the empty slot where it would go. */
static size_t listmap_slot(const listmap_t *m, span_t item, span_t user)
{
    size_t s = pair_hash(item, user) & (m->nslots - 1);
    for (; m->slots[s]; s = (s + 1) & (m->nslots - 1)) {
        const listmap_entry_t *e = &m->entries[m->slots[s] - 1];
        if (e->item_len == item.len && e->user_len == user.len && memcmp(e->item, item.ptr, item.len) == 0 &&
            memcmp(e->user, user.ptr, user.len) == 0)
            break;
    }
    return s;
}

listmap_entry_t *listmap_find(const listmap_t *m, span_t item, span_t user)
{
    if (!m->nslots)
        return NULL;
    size_t s = listmap_slot(m, item, user);
    return m->slots[s] ? &m->entries[m->slots[s] - 1] : NULL;
}

listmap_entry_t *listmap_get(listmap_t *m, span_t item, span_t user)
{
    if (item.len > ID_MAX_LEN || user.len > ID_MAX_LEN)
        return NULL;
    if (m->count == m->cap && listmap_grow(m) != 0)
        return NULL;
    size_t s = listmap_slot(m, item, user);
    if (m->slots[s])
        return &m->entries[m->slots[s] - 1];
    listmap_entry_t *e = &m->entries[m->count];
    memcpy(e->item, item.ptr, item.len);
    memcpy(e->user, user.ptr, user.len);
    e->item_len = (uint8_t)item.len;
    e->user_len = (uint8_t)user.len;
    list_change_init(&e->change);
    m->slots[s] = (uint32_t)(++m->count);
    return e;
}

void listmap_free(listmap_t *m)
{
    free(m->entries);
    free(m->slots);
    *m = (listmap_t){0};
}
