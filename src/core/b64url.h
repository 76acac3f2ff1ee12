/* b64url.h — base64url without padding (b64url.c). */
#ifndef TALLY_CORE_B64URL_H
#define TALLY_CORE_B64URL_H

#include <stddef.h>

#include "core/span.h"

#define B64URL_TEXT_MAX 8192 /* the longest text decoded: a token's (JWT_MAX_LEN) */

/* base64url without padding, canonical only (RFC 4648 §3.5): the length written to out, or -1
 * (not base64url, not canonical, longer than B64URL_TEXT_MAX, or more bytes than outcap). */
int b64url_decode(span_t in, unsigned char *out, size_t outcap);

/* len bytes of in as base64url without padding, NUL-terminated: the length, or -1 when outcap is
 * too small. */
int b64url_encode(const unsigned char *in, size_t len, char *out, size_t outcap);

#endif
