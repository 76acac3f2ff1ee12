/* kinds.h — the configured reaction kinds. Code 0 is `none`; kinds are codes 1..n in configured order. */
#ifndef TALLY_CORE_KINDS_H
#define TALLY_CORE_KINDS_H

#include <stddef.h>

#include "core/span.h"

#define KINDS_MAX 16
#define KIND_NAME_MAX 32
#define KIND_NONE 0
#define KINDS_DEFAULT "like,dislike"

/* --reaction-mode: one kind per user and item (YouTube) or a set of kinds (GitHub, Slack). */
typedef enum {
    REACTION_MODE_ONE,
    REACTION_MODE_MANY,
} reaction_mode_t;

/* The configured vocabulary of reactions: the kinds and the mode they are held in. */
typedef struct {
    reaction_mode_t mode;
    int count;                                    /* number of kinds, 1..KINDS_MAX */
    char names[KINDS_MAX + 1][KIND_NAME_MAX + 1]; /* names[0] is "none" */
} kinds_t;

/* Parses a comma-separated list ("like,love,haha"). Names are 1–32 bytes of a-z 0-9 _, unique, at
 * most 16, and not "none", "reaction" or "reactions". Returns 0, or -1 with a message in err. */
int kinds_parse(kinds_t *kinds, const char *list, char *err, size_t errlen);

/* The code of a name: 0 for "none" when allow_none, 1..count for a kind, -1 when unknown. */
int kinds_find(const kinds_t *kinds, span_t name, bool allow_none);

static inline const char *kinds_name(const kinds_t *kinds, int code)
{
    return kinds->names[code];
}

/* The name of a count slot: a kind, or "reactors" for slot 0 (users whose set is not empty). */
static inline const char *kinds_count_name(const kinds_t *kinds, int code)
{
    return code == KIND_NONE ? "reactors" : kinds->names[code];
}

#endif
