/* strmap.c — open addressing with backward-shift deletion. */
#include "core/strmap.h"

#include <stdlib.h>

#include "core/hash.h"

#define STRMAP_MIN_SLOTS 16

static size_t slot_of(const strmap_t *m, span_t key)
{
    return (size_t)hash_mix(hash_bytes(HASH_SEED, key.ptr, key.len)) & (m->nslots - 1);
}

static bool slot_is(const strmap_slot_t *s, span_t key)
{
    return s->used && s->len == key.len && memcmp(s->key, key.ptr, key.len) == 0;
}

uint64_t *strmap_find(const strmap_t *m, span_t key)
{
    if (!m->nslots || key.len == 0 || key.len > ID_MAX_LEN)
        return NULL;
    for (size_t i = slot_of(m, key);; i = (i + 1) & (m->nslots - 1)) {
        strmap_slot_t *s = &m->slots[i];
        if (!s->used)
            return NULL;
        if (slot_is(s, key))
            return &s->value;
    }
}

/* Doubles the table (or makes the first one) and puts every entry back. */
static int grow(strmap_t *m)
{
    size_t n = m->nslots ? m->nslots * 2 : STRMAP_MIN_SLOTS;
    strmap_slot_t *slots = calloc(n, sizeof *slots), *old = m->slots;
    if (!slots)
        return -1;
    size_t old_n = m->nslots;
    m->slots = slots;
    m->nslots = n;
    for (size_t i = 0; i < old_n; i++) {
        if (!old[i].used)
            continue;
        size_t j = slot_of(m, (span_t){old[i].key, old[i].len});
        while (slots[j].used)
            j = (j + 1) & (n - 1);
        slots[j] = old[i];
    }
    free(old);
    return 0;
}

uint64_t *strmap_get(strmap_t *m, span_t key)
{
    if (key.len == 0 || key.len > ID_MAX_LEN)
        return NULL;
    uint64_t *v = strmap_find(m, key);
    if (v)
        return v;
    if ((m->count + 1) * 4 > m->nslots * 3 && grow(m) != 0) /* at most 3/4 full */
        return NULL;
    size_t i = slot_of(m, key);
    while (m->slots[i].used)
        i = (i + 1) & (m->nslots - 1);
    strmap_slot_t *s = &m->slots[i];
    memcpy(s->key, key.ptr, key.len);
    s->len = (uint8_t)key.len;
    s->used = true;
    s->value = 0;
    m->count++;
    return &s->value;
}

void strmap_delete(strmap_t *m, span_t key)
{
    uint64_t *v = strmap_find(m, key);
    if (!v)
        return;
    size_t mask = m->nslots - 1;
    size_t hole = (size_t)((strmap_slot_t *)((char *)v - offsetof(strmap_slot_t, value)) - m->slots);
    m->slots[hole].used = false;
    m->count--;
    /* Shift back the entries after the hole that would no longer be found past it. */
    for (size_t i = (hole + 1) & mask; m->slots[i].used; i = (i + 1) & mask) {
        size_t home = slot_of(m, (span_t){m->slots[i].key, m->slots[i].len});
        bool reachable = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (reachable)
            continue; /* its home lies between the hole and it: it stays where it is */
        m->slots[hole] = m->slots[i];
        m->slots[i].used = false;
        hole = i;
    }
}

void strmap_free(strmap_t *m)
{
    free(m->slots);
    *m = (strmap_t){0};
}
