/* feedmerge.h — one page of the change feed (or one webhook batch) taken from several shards' logs.
 *
 * Each shard's entries after its position are read in its log order and rendered (changejson); the
 * merge interleaves them by commit time (ties: the lower shard first), always taking the head of one
 * shard's list, and stops at a limit. So what a page takes from a shard is a prefix of what follows
 * that shard's position, whatever the clocks of the nodes say: no entry is ever skipped, and each
 * shard's entries keep their log order. The order is a function of the entries alone, so merging
 * exactly the prefixes a page took gives that page again (a webhook batch sent again after a
 * restart is the same bytes). With one shard it is that shard's entries in log order.
 * Pure logic: no I/O, any thread. */
#ifndef TALLY_CORE_FEEDMERGE_H
#define TALLY_CORE_FEEDMERGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/kinds.h"
#include "core/reaction.h"
#include "core/textbuf.h"

typedef struct {
    uint64_t seq, at_ms;
    size_t off, len; /* its text in the shard's buffer */
} feedmerge_entry_t;

/* One shard's entries, in its log order. Free with feedmerge_shard_free. */
typedef struct {
    uint32_t count, shard; /* whose cursors the entries carry: shard `shard` of `count` */
    const kinds_t *kinds;  /* how they are rendered */
    uint64_t stop_after;   /* feedmerge_read_fn stops at an entry past it (UINT64_MAX: never) */
    textbuf_t text;        /* the entries' texts one after the other */
    feedmerge_entry_t *e;
    size_t n, cap;
    bool failed; /* out of memory at some point */
} feedmerge_shard_t;

/* An empty list of shard `shard` of `count`, its entries rendered with kinds. */
void feedmerge_shard_init(feedmerge_shard_t *s, const kinds_t *kinds, uint32_t count, uint32_t shard);

/* Appends the entry seq (after every one added before: the log's order) as changejson renders it,
 * with its entry cursor. Returns 0, or -1 when out of memory (s->failed set). */
int feedmerge_add(feedmerge_shard_t *s, uint64_t seq, const transition_t *t);

/* feedmerge_add as a log reader's callback (store_log_fn; arg the list): 0 to go on, 1 to stop (an
 * entry past stop_after, not added; or out of memory, s->failed set). */
int feedmerge_read_fn(void *arg, uint64_t seq, const transition_t *t);

/* Appends an entry whose text is given (what a test or another renderer made). 0, or -1. */
int feedmerge_add_text(feedmerge_shard_t *s, uint64_t seq, uint64_t at_ms, span_t text);

void feedmerge_shard_free(feedmerge_shard_t *s);

/* Merges shards[0..count) (count at most SHARD_MAX; shards[k] is shard k's, possibly empty) and appends up to limit
 * entries to out, comma-separated; positions[k] becomes the seq of the last entry taken from shard k (left as it is
 * when none was). Returns how many were taken; *first_at_ms (when not NULL) gets the commit time of the oldest entry
 * taken (the smallest), 0 when none was. */
size_t feedmerge_take(const feedmerge_shard_t *shards, uint32_t count, size_t limit, textbuf_t *out,
                      uint64_t *positions, uint64_t *first_at_ms);

#endif
