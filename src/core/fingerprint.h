/* fingerprint.h — the request fingerprint an Idempotency-Key is bound to. */
#ifndef TALLY_CORE_FINGERPRINT_H
#define TALLY_CORE_FINGERPRINT_H

#include <stdint.h>

#include "core/span.h"

#define FINGERPRINT_LEN 32

/* SHA-256 over method, path (with its query) and the raw body, each length-prefixed so that no two
 * different requests share an input. Returns 0, or -1 when the digest failed. */
int fingerprint_request(span_t method, span_t path, span_t body, uint8_t out[FINGERPRINT_LEN]);

#endif
