/* reaction.h — the reaction row, what a click asks for, and the transition it causes.
 * Pure logic: the delta table of the seed generalised to sets of kinds. A row holds a set of kinds;
 * one-of mode (`--reaction-mode one`) is the case of sets of at most one kind, so both modes share
 * one write path and one fold. */
#ifndef TALLY_CORE_REACTION_H
#define TALLY_CORE_REACTION_H

#include <assert.h>
#include <stdint.h>

#include "core/kinds.h"
#include "core/span.h"

/* A set of kind codes: bit c for code c (1..KINDS_MAX); bit 0 (`none`) is never set, and the empty
 * set is the reaction `none`. */
typedef uint32_t kindset_t;
#define KINDSET_EMPTY ((kindset_t)0)
#define KINDSET_ALL(count) ((kindset_t)(((1u << (count)) - 1u) << 1))

static inline kindset_t kindset_of(int code)
{
    assert(code >= KIND_NONE && code <= KINDS_MAX && "a kind code, not an error");
    return code == KIND_NONE ? KINDSET_EMPTY : (kindset_t)1 << code;
}

static inline bool kindset_has(kindset_t set, int code)
{
    return code != KIND_NONE && (set >> code & 1u);
}

static inline int kindset_size(kindset_t set)
{
    return __builtin_popcount(set);
}

/* The kind of a set of at most one kind: KIND_NONE for the empty set. */
static inline int kindset_single(kindset_t set)
{
    return set ? __builtin_ctz(set) : KIND_NONE;
}

/* One user's reaction to one item: the truth every count is derived from. version 0 = no row. */
typedef struct {
    kindset_t set;
    uint64_t version;
} reaction_row_t;

/* What a write asks for, with a set of kinds as its argument. */
typedef enum {
    REACT_SET,    /* the set becomes the argument (empty clears) */
    REACT_ADD,    /* the argument's kind joins: in one mode it replaces the current kind */
    REACT_REMOVE, /* the argument's kinds leave (in one mode: clear only if the reaction is that kind) */
    REACT_TOGGLE, /* remove the kind if it is held, else add it */
} react_op_t;

/* One real change of a row. */
typedef struct {
    span_t item;
    span_t user;
    kindset_t from;
    kindset_t to;
    uint64_t version; /* the row's version after the change */
    uint64_t at_ms;   /* wall-clock commit time, ms since the epoch */
    /* Whether the row counted before and after the entry, as TRANSITION_UNCOUNTED_* bits: 0 (both
     * counted) for every write of a user who is not voided. A void or a restore is an entry with
     * from == to, the version unchanged, and exactly one of the bits. */
    uint8_t uncounted;
} transition_t;

#define TRANSITION_UNCOUNTED_BEFORE 1u
#define TRANSITION_UNCOUNTED_AFTER 2u
#define TRANSITION_UNCOUNTED_BOTH 3u

/* How the stores keep `uncounted`: in two bits of the stored version above any version a row
 * reaches by counting, so an entry written before voiding existed reads as counted both ways. */
#define TRANSITION_VERSION_BITS 60
#define TRANSITION_VERSION_MASK ((UINT64_C(1) << TRANSITION_VERSION_BITS) - 1)

static inline uint64_t transition_version_pack(const transition_t *t)
{
    return (t->version & TRANSITION_VERSION_MASK) | (uint64_t)(t->uncounted & 3u) << TRANSITION_VERSION_BITS;
}

/* Sets t->version and t->uncounted from a stored version. False when the stored value has bits no
 * writer sets (above the two). */
static inline bool transition_version_unpack(transition_t *t, uint64_t stored)
{
    t->version = stored & TRANSITION_VERSION_MASK;
    t->uncounted = (uint8_t)(stored >> TRANSITION_VERSION_BITS & 3u);
    return stored >> (TRANSITION_VERSION_BITS + 2) == 0;
}

/* A well-formed entry: a real change (from != to) counted the same before and after, or a void or a
 * restore (from == to, exactly one side counted). */
static inline bool transition_well_formed(const transition_t *t)
{
    if (t->from != t->to)
        return t->uncounted == 0 || t->uncounted == TRANSITION_UNCOUNTED_BOTH;
    return t->uncounted == TRANSITION_UNCOUNTED_BEFORE || t->uncounted == TRANSITION_UNCOUNTED_AFTER;
}

/* The set a row ends up with when op(arg) is applied to current in mode. In one mode every result
 * holds at most one kind when arg and current do. */
kindset_t reaction_target(reaction_mode_t mode, react_op_t op, kindset_t arg, kindset_t current);

/* Adds the transition from→to to deltas (indexed by kind code): -1 for each kind that left the set,
 * +1 for each that joined; and deltas[0], the item's reactors (users whose set is not empty), +1
 * when the set stops being empty, -1 when it becomes empty. from == to adds nothing. */
void reaction_deltas_add(kindset_t from, kindset_t to, int64_t deltas[KINDS_MAX + 1]);

/* The counts' delta of one log entry: minus `from` if the row counted before, plus `to` if it counts
 * after (the fold a change-feed consumer does too). */
void transition_deltas_add(const transition_t *t, int64_t deltas[KINDS_MAX + 1]);

#endif
