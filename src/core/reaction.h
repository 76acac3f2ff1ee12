/* reaction.h — the reaction row, what a click asks for, and the transition it causes.
 * Pure logic: the delta table of the seed generalised to N kinds. */
#ifndef TALLY_CORE_REACTION_H
#define TALLY_CORE_REACTION_H

#include <stdint.h>

#include "core/kinds.h"
#include "core/span.h"

/* One user's reaction to one item: the truth every count is derived from. version 0 = no row. */
typedef struct {
    int kind;
    uint64_t version;
} reaction_row_t;

/* What a write asks for. */
typedef enum {
    REACT_SET,      /* set kind (KIND_NONE clears) */
    REACT_CLEAR_IF, /* clear only if the current reaction is kind */
    REACT_TOGGLE,   /* clear if the current reaction is kind, else set it */
} react_op_t;

/* One real change of a row. */
typedef struct {
    span_t item;
    span_t user;
    int from;
    int to;
    uint64_t version; /* the row's version after the change */
    uint64_t at_ms;   /* wall-clock commit time, ms since the epoch */
} transition_t;

/* The reaction a row ends up with when op(kind) is applied to current. */
int reaction_target(react_op_t op, int kind, int current);

/* Adds the transition from→to to deltas (indexed by kind code; index 0, `none`, is never touched):
 * -1 on from unless none, +1 on to unless none. from == to adds nothing. */
void reaction_deltas_add(int from, int to, int64_t deltas[KINDS_MAX + 1]);

#endif
