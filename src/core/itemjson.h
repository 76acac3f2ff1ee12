/* itemjson.h — the read answer's fixed shape, rendered into one buffer:
 *   {"item":"v1","counts":{"like":10,"dislike":2},"viewer":{"reaction":"like","version":3}}
 * A feed page is 100 of these (core/textbuf.h says why they are not jansson trees); the output is
 * byte for byte what jansson's compact dump gives (tests/unit checks both against each other). */
#ifndef TALLY_CORE_ITEMJSON_H
#define TALLY_CORE_ITEMJSON_H

#include <stdint.h>

#include "core/kinds.h"
#include "core/policy.h"
#include "core/reaction.h"
#include "core/textbuf.h"

/* Appends one item object; viewer NULL leaves the viewer member out. */
void itemjson_append(textbuf_t *b, const kinds_t *kinds, span_t item, const int64_t counts[KINDS_MAX + 1],
                     const reaction_row_t *viewer);

/* Appends an item whose shard cannot be reached, in a batch answer: {"item":"v1","unavailable":true}. */
void itemjson_unavailable_append(textbuf_t *b, span_t item);

/* Appends the viewer's own part of one item, as GET …/reaction answers it:
 * {"item":"v1","reaction":"like","version":3} ("reactions":[…] in many mode). */
void itemjson_viewer_append(textbuf_t *b, const kinds_t *kinds, span_t item, const reaction_row_t *row);
/* The same with the item's policy (NULL: none): "policy":{…} after the counts, and, when the policy
 * hides the counts and reveal is false (anyone but an admin), "counts":null (and "reactors":null). */
void itemjson_append_policy(textbuf_t *b, const kinds_t *kinds, span_t item, const int64_t counts[KINDS_MAX + 1],
                            const reaction_row_t *viewer, const policy_t *policy, bool reveal);

#endif
