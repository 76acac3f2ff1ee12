/* feedmerge.c — merging several shards' change-feed entries into one page (see feedmerge.h). */
#include "core/feedmerge.h"

#include <assert.h>
#include <stdlib.h>

#include "core/changejson.h"
#include "core/shardmap.h"

#define FEEDMERGE_FIRST_CAP 64

void feedmerge_shard_init(feedmerge_shard_t *s, const kinds_t *kinds, uint32_t count, uint32_t shard)
{
    *s = (feedmerge_shard_t){.count = count, .shard = shard, .kinds = kinds, .stop_after = UINT64_MAX};
}

/* Room for one more entry. */
static int entry_room(feedmerge_shard_t *s)
{
    if (s->failed)
        return -1;
    if (s->n < s->cap)
        return 0;
    size_t cap = s->cap ? 2 * s->cap : FEEDMERGE_FIRST_CAP;
    feedmerge_entry_t *e = realloc(s->e, cap * sizeof *e);
    if (!e) {
        s->failed = true;
        return -1;
    }
    s->e = e;
    s->cap = cap;
    return 0;
}

int feedmerge_add(feedmerge_shard_t *s, uint64_t seq, const transition_t *t)
{
    if (entry_room(s) != 0)
        return -1;
    size_t off = s->text.len;
    changejson_append_shard(&s->text, s->kinds, s->count, s->shard, seq, t);
    if (s->text.failed) {
        s->failed = true;
        return -1;
    }
    s->e[s->n++] = (feedmerge_entry_t){seq, t->at_ms, off, s->text.len - off};
    return 0;
}

int feedmerge_read_fn(void *arg, uint64_t seq, const transition_t *t)
{
    feedmerge_shard_t *s = arg;
    return seq > s->stop_after || feedmerge_add(s, seq, t) != 0 ? 1 : 0;
}

int feedmerge_add_text(feedmerge_shard_t *s, uint64_t seq, uint64_t at_ms, span_t text)
{
    if (entry_room(s) != 0)
        return -1;
    size_t off = s->text.len;
    textbuf_append(&s->text, text.ptr, text.len);
    if (s->text.failed) {
        s->failed = true;
        return -1;
    }
    s->e[s->n++] = (feedmerge_entry_t){seq, at_ms, off, text.len};
    return 0;
}

void feedmerge_shard_free(feedmerge_shard_t *s)
{
    free(s->text.buf);
    free(s->e);
    *s = (feedmerge_shard_t){0};
}

size_t feedmerge_take(const feedmerge_shard_t *shards, uint32_t count, size_t limit, textbuf_t *out,
                      uint64_t *positions, uint64_t *first_at_ms)
{
    size_t taken = 0, next[SHARD_MAX] = {0}; /* each shard's head */
    assert(count <= SHARD_MAX);
    if (first_at_ms)
        *first_at_ms = 0;
    while (taken < limit) {
        /* the head with the oldest commit time; a tie goes to the lower shard (never to a later
         * entry of the same shard: each list is only ever taken from its head) */
        uint32_t best = count;
        for (uint32_t k = 0; k < count; k++)
            if (next[k] < shards[k].n &&
                (best == count || shards[k].e[next[k]].at_ms < shards[best].e[next[best]].at_ms))
                best = k;
        if (best == count)
            break;
        const feedmerge_shard_t *s = &shards[best];
        const feedmerge_entry_t *e = &s->e[next[best]++];
        if (taken++)
            textbuf_lit(out, ",");
        if (first_at_ms && (taken == 1 || e->at_ms < *first_at_ms))
            *first_at_ms = e->at_ms;
        textbuf_append(out, s->text.buf + e->off, e->len);
        positions[best] = e->seq;
    }
    return taken;
}
