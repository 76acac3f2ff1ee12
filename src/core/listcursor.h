/* listcursor.h — the cursor of a list page (who reacted, a user's reactions): the position and the
 * name of the page's last entry, "<seq>.<name>". Opaque to clients; pure. */
#ifndef TALLY_CORE_LISTCURSOR_H
#define TALLY_CORE_LISTCURSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/ids.h"

#define LIST_CURSOR_MAX (20 + 1 + ID_MAX_LEN + 1) /* digits of a u64, '.', a name, NUL */

/* Writes the cursor of (seq, name) into out; returns its length. */
size_t list_cursor_format(char out[LIST_CURSOR_MAX], uint64_t seq, span_t name);

/* Reads a cursor: a decimal position (no sign, no leading zero but "0"), '.', a valid id. Returns 0
 * (name points into text), or -1 when text is not one. */
int list_cursor_parse(span_t text, uint64_t *seq, span_t *name);

#endif
