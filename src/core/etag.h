/* etag.h — weak validators of answer bodies, and If-None-Match against them (RFC 9110 §8.8.3,
 * §13.1.2). A public read's ETag is a function of its body alone, so every node (and every restart)
 * gives the same tag for the same counts, and a CDN may revalidate against any node. */
#ifndef TALLY_CORE_ETAG_H
#define TALLY_CORE_ETAG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/span.h"

/* The digest bytes kept: 16 of SHA-256's 32 (128 bits), as 22 base64url characters. Collisions
 * between two bodies of one URL are what would matter, and 128 bits makes them beyond reach. */
#define ETAG_DIGEST_BYTES 16
#define ETAG_WEAK_LEN (2 + 1 + 22 + 1)     /* W/"<22 characters>" */
#define ETAG_WEAK_SIZE (ETAG_WEAK_LEN + 1) /* with its terminating NUL */

/* W/"<base64url of the first 16 bytes of SHA-256(body)>" into out (NUL-terminated). Returns its
 * length (ETAG_WEAK_LEN), or 0 when the digest failed (out is then ""). */
size_t etag_weak(const void *body, size_t len, char out[ETAG_WEAK_SIZE]);

/* Whether an If-None-Match field value names etag: "*", or a list of entity tags, each "x" or
 * W/"x", separated by commas and optional whitespace, compared weakly (the W/ of either side is
 * ignored). A malformed list matches nothing, so the full answer goes out. */
bool etag_none_match(span_t field, span_t etag);

#endif
