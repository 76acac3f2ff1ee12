/* reaction.c — transitions and their deltas. */
#include "core/reaction.h"

#include <assert.h>

int reaction_target(react_op_t op, int kind, int current)
{
    switch (op) {
    case REACT_SET:
        return kind;
    case REACT_CLEAR_IF:
        return current == kind ? KIND_NONE : current;
    case REACT_TOGGLE:
        return current == kind ? KIND_NONE : kind;
    }
    assert(!"unknown react_op_t");
    return current;
}

void reaction_deltas_add(int from, int to, int64_t deltas[KINDS_MAX + 1])
{
    assert(from >= 0 && from <= KINDS_MAX && to >= 0 && to <= KINDS_MAX);
    if (from == to)
        return;
    if (from != KIND_NONE)
        deltas[from] -= 1;
    if (to != KIND_NONE)
        deltas[to] += 1;
}
