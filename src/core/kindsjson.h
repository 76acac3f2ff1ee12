/* kindsjson.h — a set of kinds as JSON: a name in one mode ("like", "none"), an array of names in
 * the configured order in many mode (["like","love"], [] for none). One place for both shapes, so
 * every answer, page and push renders a reaction the same way. */
#ifndef TALLY_CORE_KINDSJSON_H
#define TALLY_CORE_KINDSJSON_H

#include <jansson.h>

#include "core/kinds.h"
#include "core/reaction.h"
#include "core/textbuf.h"

/* The member that carries a reaction: "reaction" in one mode, "reactions" in many. */
static inline const char *kindset_member(const kinds_t *kinds)
{
    return kinds->mode == REACTION_MODE_MANY ? "reactions" : "reaction";
}

/* A new reference: the set as the mode writes it (NULL when out of memory). */
json_t *kindset_json(const kinds_t *kinds, kindset_t set);

/* The same set appended as text (what json_dumps of kindset_json gives). */
void kindset_append(textbuf_t *b, const kinds_t *kinds, kindset_t set);

/* Reads an array of kind names (each configured, none repeated) into *set. Returns 0, or -1 with a
 * message in err. */
int kindset_from_json(const kinds_t *kinds, const json_t *array, kindset_t *set, char *err, size_t errlen);

/* Reads kind names joined by sep ("like|love"; "" is the empty set) into *set. Returns 0, or -1. */
int kindset_from_text(const kinds_t *kinds, span_t text, char sep, kindset_t *set, char *err, size_t errlen);

#endif
