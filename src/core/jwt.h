/* jwt.h — HS256 JSON Web Tokens: verification against one or more secrets (rotation), and
 * signing for the operator's tool. Crypto and base64 are OpenSSL's; JSON is jansson's. */
#ifndef TALLY_CORE_JWT_H
#define TALLY_CORE_JWT_H

#include <stdint.h>

#include "core/ids.h"
#include "core/span.h"

#define JWT_MAX_LEN 4096
#define JWT_SECRETS_MAX 8

typedef struct {
    char sub[ID_MAX_LEN + 1];
    bool admin; /* "role":"admin" */
    uint64_t exp;
} jwt_claims_t;

/* Verifies token (header.payload.signature): alg HS256, a signature made with one of the secrets
 * (compared in constant time), `exp` present and after now_s, `nbf` (if any) not after now_s, and
 * `sub` a valid user id. Returns 0 with claims filled, or -1 with a reason in why. */
int jwt_verify(span_t token, const span_t *secrets, size_t nsecrets, uint64_t now_s, jwt_claims_t *claims,
               const char **why);

/* Signs {"sub":…,"exp":…[,"role":"admin"]}. Returns the token's length, or -1. */
int jwt_sign(const char *sub, bool admin, uint64_t exp, span_t secret, char *out, size_t outlen);

/* A shorter HS256 key is refused: RFC 7518 §3.2 asks for a key at least as long as the hash (256 bits). */
#define JWT_SECRET_MIN_LEN 32

/* Splits a secret file's text (or TALLY_JWT_SECRET) into secrets: one per line, each line's \n or
 * \r\n stripped, empty lines skipped. Returns the count (1..JWT_SECRETS_MAX), or -1 with err
 * filled: no secret, more than JWT_SECRETS_MAX, or one shorter than JWT_SECRET_MIN_LEN bytes.
 * The spans point into text. */
int jwt_secrets_parse(span_t text, span_t secrets[JWT_SECRETS_MAX], char *err, size_t errlen);

#endif
