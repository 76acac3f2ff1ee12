/* ids.h — the id alphabet shared by items and users (docs/api.md § Ids and kinds). */
#ifndef TALLY_CORE_IDS_H
#define TALLY_CORE_IDS_H

#include "core/span.h"

#define ID_MAX_LEN 128

/* True when s is 1–128 bytes of A-Z a-z 0-9 . _ : ~ - and is not "." or "..".
 * Percent-encoded input is invalid by construction ('%' is outside the alphabet). */
bool id_valid(span_t s);

#endif
