/* jwt.h — JSON Web Tokens: verification of HS256 against one or more secrets (rotation) and of
 * RS256, PS256, ES256 and EdDSA against JWK Sets (core/jwk.h), the claims an identity provider
 * puts in them, and HS256 signing for the operator's tool. Crypto and base64 are OpenSSL's; JSON is
 * jansson's. */
#ifndef TALLY_CORE_JWT_H
#define TALLY_CORE_JWT_H

#include <jansson.h>
#include <stdint.h>

#include "core/ids.h"
#include "core/jwk.h"
#include "core/span.h"

#define JWT_MAX_LEN 8192 /* an identity provider's token with many roles passes 4 KiB */
#define JWT_SECRETS_MAX 8
#define JWT_UNKNOWN_KID (-2) /* jwt_verify_with: the token names a kid no key set has */
#define JWT_DEFAULT_USER_CLAIM "sub"
#define JWT_DEFAULT_ADMIN_CLAIM "role"
#define JWT_DEFAULT_ADMIN_VALUE "admin"

typedef struct {
    char sub[ID_MAX_LEN + 1]; /* the user: the user claim's value */
    bool admin;               /* the admin claim holds the admin value */
    uint64_t exp;
} jwt_claims_t;

/* What a token is checked against. NULL strings take the defaults (no issuer or audience check). */
typedef struct {
    const span_t *secrets; /* HS256 */
    size_t nsecrets;
    const jwk_set_t *const *sets; /* RS256, PS256, ES256, EdDSA */
    size_t nsets;
    const char *issuer;      /* `iss` must equal it */
    const char *audience;    /* `aud` (a string or an array of strings) must contain it */
    const char *user_claim;  /* a claim path (jwt_claim_find): the user id */
    const char *admin_claim; /* a claim path: admin when it holds admin_value */
    const char *admin_value;
} jwt_verifier_t;

/* Verifies token (header.payload.signature). The header: an object with a known `alg` and no
 * `crit` (no extension is understood, RFC 7515 §4.1.11); HS256 needs one of the secrets (compared
 * in constant time), another alg a key of the sets that fits it — the one whose `kid` the header
 * names, or without a kid any that fits. The claims: `exp` present and after now_s, `nbf` (if any)
 * not after now_s (no leeway on either), `iss` and `aud` when asked for, and the user claim a valid
 * user id. Returns 0 with claims filled, JWT_UNKNOWN_KID when the kid is in no set, or -1; why says
 * what was wrong. */
int jwt_verify_with(span_t token, const jwt_verifier_t *v, uint64_t now_s, jwt_claims_t *claims, const char **why);

/* jwt_verify_with, HS256 only, with the default claims. */
int jwt_verify(span_t token, const span_t *secrets, size_t nsecrets, uint64_t now_s, jwt_claims_t *claims,
               const char **why);

/* The claim at path in claims: the member named path when there is one (a namespaced claim such as
 * "https://example.com/roles" keeps its dots), else the dotted path walked through nested objects
 * ("realm_access.roles"). NULL when absent. */
const json_t *jwt_claim_find(const json_t *claims, const char *path);

/* True when the claim at path is a string equal to value, or an array holding that string. */
bool jwt_claim_holds(const json_t *claims, const char *path, const char *value);

/* Signs {"sub":…,"exp":…[,"role":"admin"]}. Returns the token's length, or -1. */
int jwt_sign(const char *sub, bool admin, uint64_t exp, span_t secret, char *out, size_t outlen);

/* A shorter HS256 key is refused: RFC 7518 §3.2 asks for a key at least as long as the hash (256 bits). */
#define JWT_SECRET_MIN_LEN 32

/* An HS256 secret strong enough to sign with: at least JWT_SECRET_MIN_LEN bytes, not one byte
 * repeated, not whitespace only. Returns NULL, or why not. */
const char *jwt_secret_weakness(span_t secret);

/* Splits a secret file's text (or TALLY_JWT_SECRET) into secrets: one per line, each line's \n or
 * \r\n stripped, empty lines skipped. Returns the count (1..JWT_SECRETS_MAX), or -1 with err
 * filled: no secret, more than JWT_SECRETS_MAX, or a weak one (jwt_secret_weakness). The spans
 * point into text. */
int jwt_secrets_parse(span_t text, span_t secrets[JWT_SECRETS_MAX], char *err, size_t errlen);

#endif
