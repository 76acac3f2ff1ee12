/* spacesaving.c — a min-heap of counters with a hash index on the item. */
#include "core/spacesaving.h"

#include <stdlib.h>

static uint64_t hash_item(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

int ss_init(spacesaving_t *s, size_t capacity)
{
    *s = (spacesaving_t){.capacity = capacity ? capacity : 1};
    s->nslots = 4;
    while (s->nslots < 2 * s->capacity)
        s->nslots *= 2;
    s->slots = calloc(s->nslots, sizeof *s->slots);
    return s->slots ? 0 : -1;
}

void ss_free(spacesaving_t *s)
{
    free(s->heap);
    free(s->slots);
    *s = (spacesaving_t){0};
}

void ss_clear(spacesaving_t *s)
{
    s->n = 0;
    s->total = 0;
    memset(s->slots, 0, s->nslots * sizeof *s->slots);
}

/* The slot of item, or the empty slot where it would go. */
static size_t slot_of(const spacesaving_t *s, const char *item, size_t len)
{
    size_t i = hash_item(item, len) & (s->nslots - 1);
    while (s->slots[i]) {
        const ss_counter_t *c = &s->heap[s->slots[i] - 1];
        if (c->item_len == len && memcmp(c->item, item, len) == 0)
            break;
        i = (i + 1) & (s->nslots - 1);
    }
    return i;
}

/* Removes the index entry at slot i, re-placing the entries after it (linear probing). */
static void slot_delete(spacesaving_t *s, size_t i)
{
    s->slots[i] = 0;
    for (size_t j = (i + 1) & (s->nslots - 1); s->slots[j]; j = (j + 1) & (s->nslots - 1)) {
        uint32_t v = s->slots[j];
        s->slots[j] = 0;
        const ss_counter_t *c = &s->heap[v - 1];
        s->slots[slot_of(s, c->item, c->item_len)] = v;
    }
}

/* Swaps two heap entries and their index slots (found before the swap, while they still agree). */
static void heap_swap(spacesaving_t *s, size_t a, size_t b)
{
    size_t slot_a = slot_of(s, s->heap[a].item, s->heap[a].item_len);
    size_t slot_b = slot_of(s, s->heap[b].item, s->heap[b].item_len);
    ss_counter_t t = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = t;
    s->slots[slot_a] = (uint32_t)(b + 1);
    s->slots[slot_b] = (uint32_t)(a + 1);
}

static void sift_down(spacesaving_t *s, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->n && s->heap[l].count < s->heap[m].count)
            m = l;
        if (r < s->n && s->heap[r].count < s->heap[m].count)
            m = r;
        if (m == i)
            return;
        heap_swap(s, i, m);
        i = m;
    }
}

static void sift_up(spacesaving_t *s, size_t i)
{
    while (i > 0 && s->heap[(i - 1) / 2].count > s->heap[i].count) {
        heap_swap(s, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

uint64_t ss_min(const spacesaving_t *s)
{
    return s->n == s->capacity && s->n ? s->heap[0].count : 0;
}

int ss_add(spacesaving_t *s, span_t item, uint64_t weight)
{
    if (item.len > ID_MAX_LEN || weight == 0)
        return -1;
    size_t i = slot_of(s, item.ptr, item.len);
    if (s->slots[i]) {
        size_t pos = s->slots[i] - 1;
        s->heap[pos].count += weight;
        s->total += weight;
        sift_down(s, pos);
        return 0;
    }
    if (s->n < s->capacity) {
        if (s->n == s->cap_alloc) {
            size_t cap = s->cap_alloc ? s->cap_alloc * 2 : 16;
            if (cap > s->capacity)
                cap = s->capacity;
            ss_counter_t *h = realloc(s->heap, cap * sizeof *h);
            if (!h)
                return -1;
            s->heap = h;
            s->cap_alloc = cap;
        }
        ss_counter_t *c = &s->heap[s->n];
        memcpy(c->item, item.ptr, item.len);
        c->item_len = (uint8_t)item.len;
        c->count = weight;
        c->error = 0;
        s->slots[i] = (uint32_t)(++s->n);
        s->total += weight;
        sift_up(s, s->n - 1);
        return 0;
    }
    /* Full: the new item takes the smallest counter's place and count. */
    ss_counter_t *min = &s->heap[0];
    slot_delete(s, slot_of(s, min->item, min->item_len));
    uint64_t floor = min->count;
    memcpy(min->item, item.ptr, item.len);
    min->item_len = (uint8_t)item.len;
    min->error = floor;
    min->count = floor + weight;
    s->slots[slot_of(s, item.ptr, item.len)] = 1;
    s->total += weight;
    sift_down(s, 0);
    return 0;
}

const ss_counter_t *ss_find(const spacesaving_t *s, span_t item)
{
    if (item.len > ID_MAX_LEN)
        return NULL;
    size_t i = slot_of(s, item.ptr, item.len);
    return s->slots[i] ? &s->heap[s->slots[i] - 1] : NULL;
}

#define SS_MAGIC 0x53533031u /* "SS01" */

int ss_encode(const spacesaving_t *s, uint8_t **out, size_t *len)
{
    size_t n = 16;
    for (size_t i = 0; i < s->n; i++)
        n += 1 + s->heap[i].item_len + 16;
    uint8_t *buf = malloc(n), *p = buf;
    if (!buf)
        return -1;
    uint32_t magic = SS_MAGIC, count = (uint32_t)s->n;
    memcpy(p, &magic, 4);
    memcpy(p + 4, &count, 4);
    memcpy(p + 8, &s->total, 8);
    p += 16;
    for (size_t i = 0; i < s->n; i++) {
        const ss_counter_t *c = &s->heap[i];
        *p++ = c->item_len;
        memcpy(p, c->item, c->item_len);
        p += c->item_len;
        memcpy(p, &c->count, 8);
        memcpy(p + 8, &c->error, 8);
        p += 16;
    }
    *out = buf;
    *len = n;
    return 0;
}

int ss_decode(spacesaving_t *s, size_t capacity, const uint8_t *buf, size_t len)
{
    uint32_t magic, count;
    if (len < 16 || ss_init(s, capacity) != 0)
        return -1;
    memcpy(&magic, buf, 4);
    memcpy(&count, buf + 4, 4);
    uint64_t total;
    memcpy(&total, buf + 8, 8);
    const uint8_t *p = buf + 16, *end = buf + len;
    for (uint32_t i = 0; magic == SS_MAGIC && i < count; i++) {
        if (p >= end || p + 1 + *p + 16 > end || *p > ID_MAX_LEN)
            goto fail;
        span_t item = {(const char *)p + 1, *p};
        uint64_t c, e;
        memcpy(&c, p + 1 + *p, 8);
        memcpy(&e, p + 1 + *p + 8, 8);
        if (c == 0 || ss_add(s, item, c) != 0)
            goto fail;
        s->heap[s->slots[slot_of(s, item.ptr, item.len)] - 1].error = e;
        p += 1 + *p + 16;
    }
    if (magic != SS_MAGIC)
        goto fail;
    s->total = total;
    return 0;
fail:
    ss_free(s);
    return -1;
}
