/* whsign.h — the Tally-Signature header of a webhook delivery: t=<unix seconds>,v1=<hex
 * HMAC-SHA256 of "<t>.<body>" with a secret>[,v1=<same with each previous secret still alive>]. Pure. */
#ifndef TALLY_CORE_WHSIGN_H
#define TALLY_CORE_WHSIGN_H

#include <stddef.h>
#include <stdint.h>

#include "core/span.h"

#define WHSIGN_HEX_LEN 64 /* SHA-256: 32 bytes as hex */
#define WHSIGN_KEYS_MAX 4 /* the secret, and up to 3 previous ones, each until the time its rotation promised */
/* "t=" + 20 digits, then ",v1=" + 64 hex per key */
#define WHSIGN_HEADER_MAX (2 + 20 + WHSIGN_KEYS_MAX * (4 + WHSIGN_HEX_LEN) + 1)

/* hex(HMAC-SHA256(key, "<t>.<body>")) into out (NUL-terminated). Returns 0, or -1. */
int whsign_hmac_hex(span_t key, uint64_t t, span_t body, char out[WHSIGN_HEX_LEN + 1]);

/* The header value for keys[0..nkeys) (nkeys 1 to WHSIGN_KEYS_MAX) into out (NUL-terminated). Returns 0, or -1. */
int whsign_header(uint64_t t, span_t body, const span_t *keys, size_t nkeys, char out[WHSIGN_HEADER_MAX]);

#endif
