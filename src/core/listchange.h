/* listchange.h — what the lists (who reacted to an item, what a user reacted to) learn from the log:
 * the net change of one (item, user) pair over a run of its transitions, and a map of such changes
 * keyed by pair, so the fold hands each pair's change to the store once. Pure logic.
 *
 * A pair is listed under "any kind" at the position (log seq) of its last change while its set is
 * not empty, and under each kind K of its set at the position where K last joined the set. */
#ifndef TALLY_CORE_LISTCHANGE_H
#define TALLY_CORE_LISTCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/ids.h"
#include "core/reaction.h"

typedef struct {
    kindset_t set;       /* the pair's set after the change (empty: it leaves every list) */
    uint64_t seq, at_ms; /* position and commit time of the last change ("any kind") */
    kindset_t joined;    /* kinds of set whose position moves, to kind_seq[k] / kind_at[k] */
    uint64_t kind_seq[KINDS_MAX + 1], kind_at[KINDS_MAX + 1];
} list_change_t;

/* A change that did nothing yet: joined empty (set is filled by the first list_change_add). */
void list_change_init(list_change_t *c);

/* Adds the transition from→to at position seq (after those added before it): kinds that joined
 * (in to, not in from) move to seq; kinds that left stop being listed. */
void list_change_add(list_change_t *c, kindset_t from, kindset_t to, uint64_t seq, uint64_t at_ms);

/* c followed by next, as one change (next's transitions came after c's). */
void list_change_merge(list_change_t *c, const list_change_t *next);

typedef struct {
    char item[ID_MAX_LEN], user[ID_MAX_LEN];
    uint8_t item_len, user_len;
    list_change_t change;
} listmap_entry_t;

typedef struct {
    listmap_entry_t *entries; /* in insertion order */
    size_t count, cap;
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t nslots;
} listmap_t;

/* The entry of (item, user), created (list_change_init) if new; NULL when out of memory or an id is
 * longer than ID_MAX_LEN. */
listmap_entry_t *listmap_get(listmap_t *m, span_t item, span_t user);
/* The entry of (item, user), or NULL when absent. */
listmap_entry_t *listmap_find(const listmap_t *m, span_t item, span_t user);
void listmap_free(listmap_t *m);

#endif
