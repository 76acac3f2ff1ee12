/* jwk.h — public keys from a JWK Set (RFC 7517) and JWS signature checks with them (RFC 7518):
 * RS256, PS256, ES256 and EdDSA (Ed25519). Keys are built with OpenSSL's EVP_PKEY_fromdata and
 * signatures checked with EVP_DigestVerify; JSON is jansson's. Pure: text in, keys out. */
#ifndef TALLY_CORE_JWK_H
#define TALLY_CORE_JWK_H

#include <stdbool.h>
#include <stddef.h>

#include "core/span.h"

#define JWK_SET_MAX_BYTES (1u << 20) /* a JWK Set larger than this is refused */
#define JWK_KEYS_MAX 64              /* keys used from one set; more are skipped */
#define JWK_KID_MAX 256
#define JWK_RSA_MIN_BITS 2048
#define JWK_SIG_MAX 1024 /* an 8192-bit RSA signature */
#define JWK_ES256_SIG_LEN 64
#define JWK_ES256_DER_MAX 72 /* SEQUENCE { INTEGER r, INTEGER s }, each up to 33 bytes */

typedef enum { JWK_RSA, JWK_EC_P256, JWK_ED25519 } jwk_type_t;

/* The JWS algorithms verified with a key of a set (HS256 is the shared secrets' business). */
typedef enum { JWS_ALG_RS256, JWS_ALG_PS256, JWS_ALG_ES256, JWS_ALG_EDDSA, JWS_ALG_OTHER } jws_alg_t;

typedef struct jwk jwk_t;
typedef struct jwk_set jwk_set_t; /* immutable once parsed */

/* The JWS algorithm named alg ("RS256", …), or JWS_ALG_OTHER. */
jws_alg_t jws_alg_of(const char *alg);

/* Parses a JWK Set ({"keys":[…]}). A key that cannot be used — `use` other than "sig", an
 * unsupported kty, crv or alg, missing or malformed parameters, an RSA modulus under
 * JWK_RSA_MIN_BITS, a point off the curve — is skipped, and why is appended to notes ("key 2
 * (kid k1): …; "), cut to noteslen. Returns the set (at least one usable key), or NULL with err
 * filled: not JSON, not a set, larger than JWK_SET_MAX_BYTES, or no usable key. */
jwk_set_t *jwk_set_parse(span_t text, char *notes, size_t noteslen, char *err, size_t errlen);

void jwk_set_free(jwk_set_t *set);

size_t jwk_set_count(const jwk_set_t *set);
const jwk_t *jwk_set_key(const jwk_set_t *set, size_t i);

/* The key of set whose kid is kid, or NULL. */
const jwk_t *jwk_set_find(const jwk_set_t *set, const char *kid);

jwk_type_t jwk_type(const jwk_t *key);
const char *jwk_kid(const jwk_t *key); /* "" when the JWK has none */

/* True when key may verify alg: its type fits (RSA: RS256 and PS256; EC P-256: ES256; Ed25519:
 * EdDSA) and, when the JWK names an `alg`, it is this one. */
bool jwk_fits(const jwk_t *key, jws_alg_t alg);

/* Checks sig over data with key for alg (which must fit the key). Returns true when it verifies. */
bool jwk_verify(const jwk_t *key, jws_alg_t alg, span_t data, const unsigned char *sig, size_t siglen);

/* A JWS ES256 signature is r‖s, 32 bytes each (RFC 7518 §3.4); OpenSSL verifies the DER of an
 * ECDSA-Sig-Value. Returns the DER's length (at most JWK_ES256_DER_MAX), or -1. */
int jwk_es256_sig_to_der(const unsigned char rs[JWK_ES256_SIG_LEN], unsigned char *der, size_t cap);

#endif
