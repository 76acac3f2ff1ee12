/* reaction.c — transitions and their deltas. */
#include "core/reaction.h"

#include <assert.h>

kindset_t reaction_target(reaction_mode_t mode, react_op_t op, kindset_t arg, kindset_t current)
{
    switch (op) {
    case REACT_SET:
        return arg;
    case REACT_ADD:
        return mode == REACTION_MODE_MANY ? current | arg : arg;
    case REACT_REMOVE:
        return current & ~arg;
    case REACT_TOGGLE:
        return (current & arg) ? current & ~arg : reaction_target(mode, REACT_ADD, arg, current);
    }
    assert(!"unknown react_op_t");
    return current;
}

void reaction_deltas_add(kindset_t from, kindset_t to, int64_t deltas[KINDS_MAX + 1])
{
    assert(!(from & 1u) && !(to & 1u) && "none is not a member of a set");
    assert(from >> (KINDS_MAX + 1) == 0 && to >> (KINDS_MAX + 1) == 0);
    kindset_t left = from & ~to, joined = to & ~from;
    for (kindset_t s = left; s; s &= s - 1)
        deltas[__builtin_ctz(s)] -= 1;
    for (kindset_t s = joined; s; s &= s - 1)
        deltas[__builtin_ctz(s)] += 1;
    if (!from && to)
        deltas[KIND_NONE] += 1;
    else if (from && !to)
        deltas[KIND_NONE] -= 1;
}

void transition_deltas_add(const transition_t *t, int64_t deltas[KINDS_MAX + 1])
{
    reaction_deltas_add(t->uncounted & TRANSITION_UNCOUNTED_BEFORE ? KINDSET_EMPTY : t->from,
                        t->uncounted & TRANSITION_UNCOUNTED_AFTER ? KINDSET_EMPTY : t->to, deltas);
}
