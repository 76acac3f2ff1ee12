/* jwt.c — JWT verification (HS256 with the secrets, other algorithms with JWK Sets) and HS256 signing. */
#include "core/jwt.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/jsontext.h"

#define SIG_LEN 32
#define CLAIM_PATH_MAX 256

/* The 6-bit value of a base64url character, or -1 for anything else (padding, whitespace, + and /). */
static int b64url_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '-' ? 62 : c == '_' ? 63 : -1;
}

/* base64url (no padding) → bytes, through OpenSSL's standard base64. Only the canonical encoding is
 * taken: every character from the alphabet (OpenSSL's decoder would skip whitespace) and the bits
 * that the last character carries beyond the data zero — else four texts decode to one signature,
 * and a changed token still verifies (RFC 4648 §3.5). Returns the length or -1. */
int jwt_b64url_decode(span_t in, unsigned char *out, size_t outcap)
{
    size_t padded = (in.len + 3) / 4 * 4;
    if (in.len % 4 == 1 || padded / 4 * 3 > outcap || padded > JWT_MAX_LEN)
        return -1;
    char buf[JWT_MAX_LEN + 4];
    for (size_t i = 0; i < in.len; i++) {
        char c = in.ptr[i];
        if (b64url_value(c) < 0)
            return -1; /* not base64url */
        buf[i] = c == '-' ? '+' : c == '_' ? '/' : c;
    }
    /* 2 characters of a last group carry 8 bits (4 unused), 3 carry 16 (2 unused). */
    int unused_mask = in.len % 4 == 2 ? 0x0f : in.len % 4 == 3 ? 0x03 : 0;
    if (in.len && (b64url_value(in.ptr[in.len - 1]) & unused_mask) != 0)
        return -1;
    for (size_t i = in.len; i < padded; i++)
        buf[i] = '=';
    int n = EVP_DecodeBlock(out, (const unsigned char *)buf, (int)padded);
    if (n < 0)
        return -1;
    return n - (int)(padded - in.len); /* EVP_DecodeBlock counts the padding as zero bytes */
}

static int b64url_encode(const unsigned char *in, size_t len, char *out, size_t outcap)
{
    if ((len + 2) / 3 * 4 + 1 > outcap)
        return -1;
    int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    while (n > 0 && out[n - 1] == '=')
        n--;
    for (int i = 0; i < n; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    out[n] = '\0';
    return n;
}

static bool hs256(span_t secret, span_t data, unsigned char mac[SIG_LEN])
{
    unsigned int len = 0;
    return HMAC(EVP_sha256(), secret.ptr, (int)secret.len, (const unsigned char *)data.ptr, data.len, mac, &len) &&
           len == SIG_LEN;
}

static json_t *decode_json(span_t part)
{
    unsigned char buf[JWT_MAX_LEN];
    int n = jwt_b64url_decode(part, buf, sizeof buf);
    return n < 0 ? NULL : json_loadb((const char *)buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
}

/* A JSON string equal to s, byte for byte (an embedded NUL does not end it). */
static bool json_str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && json_string_length(v) == strlen(s) && memcmp(json_string_value(v), s, strlen(s)) == 0;
}

const json_t *jwt_claim_find(const json_t *claims, const char *path)
{
    const json_t *v = json_object_get(claims, path);
    if (v || !strchr(path, '.') || strlen(path) > CLAIM_PATH_MAX)
        return v;
    char buf[CLAIM_PATH_MAX + 1];
    snprintf(buf, sizeof buf, "%s", path);
    v = claims;
    for (char *name = buf, *dot; v && name; name = dot ? dot + 1 : NULL) {
        dot = strchr(name, '.');
        if (dot)
            *dot = '\0';
        v = json_object_get(v, name); /* NULL for a non-object on the way */
    }
    return v;
}

bool jwt_claim_holds(const json_t *claims, const char *path, const char *value)
{
    const json_t *v = jwt_claim_find(claims, path), *e;
    size_t i;
    if (json_is_string(v))
        return json_str_eq(v, value);
    json_array_foreach(v, i, e)
    {
        if (json_str_eq(e, value))
            return true;
    }
    return false;
}

/* The header's alg (HS256 or a jws_alg_t) and kid. Returns 0, or -1 with why. */
static int check_header(span_t part, bool *hs256_alg, jws_alg_t *alg, char *kid, size_t kidcap, const char **why)
{
    json_t *h = decode_json(part);
    const json_t *a = json_object_get(h, "alg"), *k = json_object_get(h, "kid");
    const char *name = json_string_value(a);
    int rc = -1;
    kid[0] = '\0';
    if (!json_is_object(h) || !name)
        *why = "malformed token: the header is not a JSON object with an alg";
    else if (strlen(name) != json_string_length(a))
        *why = "the token's alg is not one of HS256, RS256, PS256, ES256, EdDSA";
    else if (json_object_get(h, "crit"))
        *why = "the token's header has crit: no JWS extension is understood";
    else if (k && (!json_is_string(k) || json_string_length(k) >= kidcap ||
                   strlen(json_string_value(k)) != json_string_length(k)))
        *why = "the token's kid is not a string of at most 256 bytes";
    else {
        *hs256_alg = strcmp(name, "HS256") == 0;
        *alg = jws_alg_of(name);
        if (!*hs256_alg && *alg == JWS_ALG_OTHER)
            *why = "the token's alg is not one of HS256, RS256, PS256, ES256, EdDSA";
        else
            rc = 0;
        if (k)
            snprintf(kid, kidcap, "%s", json_string_value(k));
    }
    json_decref(h);
    return rc;
}

static bool audience_holds(const json_t *aud, const char *want)
{
    const json_t *e;
    size_t i;
    if (json_is_string(aud))
        return json_str_eq(aud, want);
    json_array_foreach(aud, i, e)
    {
        if (json_str_eq(e, want))
            return true;
    }
    return false;
}

static int check_claims(span_t part, const jwt_verifier_t *v, uint64_t now_s, jwt_claims_t *claims, const char **why)
{
    json_t *c = decode_json(part);
    const json_t *exp = json_object_get(c, "exp"), *nbf = json_object_get(c, "nbf");
    const json_t *iss = json_object_get(c, "iss");
    const json_t *user = jwt_claim_find(c, v->user_claim ? v->user_claim : JWT_DEFAULT_USER_CLAIM);
    int rc = -1;
    if (!json_is_object(c))
        *why = "the token's claims are not a JSON object";
    else if (!json_is_number(exp))
        *why = "the token has no exp";
    else if (json_number_value(exp) <= (double)now_s)
        *why = "the token has expired";
    else if (nbf && (!json_is_number(nbf) || json_number_value(nbf) > (double)now_s))
        *why = "the token is not valid yet (nbf)";
    else if (v->issuer && !json_str_eq(iss, v->issuer))
        *why = "the token's iss is not the expected issuer";
    else if (v->audience && !audience_holds(json_object_get(c, "aud"), v->audience))
        *why = "the token's aud does not name this service";
    else if (!json_is_string(user) || !id_valid((span_t){json_string_value(user), json_string_length(user)}))
        *why = "the token's user claim is not a valid user id: 1-128 bytes of A-Z a-z 0-9 . _ : ~ - "
               "(and not . or ..)";
    else {
        snprintf(claims->sub, sizeof claims->sub, "%s", json_string_value(user));
        claims->admin = jwt_claim_holds(c, v->admin_claim ? v->admin_claim : JWT_DEFAULT_ADMIN_CLAIM,
                                        v->admin_value ? v->admin_value : JWT_DEFAULT_ADMIN_VALUE);
        double e = json_number_value(exp); /* above now_s, so positive; clamp before converting */
        claims->exp = e >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)e;
        rc = 0;
    }
    json_decref(c);
    return rc;
}

/* The signature by a key of the sets: the kid's, or any that fits alg. Returns 0, JWT_UNKNOWN_KID
 * or -1, with why. */
static int check_key_signature(const jwt_verifier_t *v, jws_alg_t alg, const char *kid, span_t signed_part,
                               const unsigned char *sig, size_t siglen, const char **why)
{
    if (v->nsets == 0) {
        *why = "the token's alg is not accepted: only HS256 tokens are (no --jwt-keys or --jwt-jwks-url)";
        return -1;
    }
    if (kid[0]) {
        for (size_t s = 0; s < v->nsets; s++) {
            const jwk_t *key = jwk_set_find(v->sets[s], kid);
            if (!key)
                continue;
            if (!jwk_fits(key, alg)) {
                *why = "the token's alg does not fit the key its kid names";
                return -1;
            }
            if (jwk_verify(key, alg, signed_part, sig, siglen))
                return 0;
            *why = "bad signature";
            return -1;
        }
        *why = "the token's kid names no known key";
        return JWT_UNKNOWN_KID;
    }
    bool fits = false;
    for (size_t s = 0; s < v->nsets; s++)
        for (size_t i = 0; i < jwk_set_count(v->sets[s]); i++) {
            const jwk_t *key = jwk_set_key(v->sets[s], i);
            if (!jwk_fits(key, alg))
                continue;
            fits = true;
            if (jwk_verify(key, alg, signed_part, sig, siglen))
                return 0;
        }
    *why = fits ? "bad signature" : "no key fits the token's alg";
    return -1;
}

int jwt_verify_with(span_t token, const jwt_verifier_t *v, uint64_t now_s, jwt_claims_t *claims, const char **why)
{
    *why = "malformed token";
    if (token.len == 0 || token.len > JWT_MAX_LEN) {
        if (token.len > JWT_MAX_LEN)
            *why = "the token is longer than 8 KiB";
        return -1;
    }
    const char *dot1 = memchr(token.ptr, '.', token.len);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', token.len - (size_t)(dot1 + 1 - token.ptr)) : NULL;
    if (!dot1 || !dot2 || memchr(dot2 + 1, '.', token.len - (size_t)(dot2 + 1 - token.ptr)))
        return -1;
    span_t header = {token.ptr, (size_t)(dot1 - token.ptr)};
    span_t payload = {dot1 + 1, (size_t)(dot2 - dot1 - 1)};
    span_t signed_part = {token.ptr, (size_t)(dot2 - token.ptr)};
    span_t sig_text = {dot2 + 1, token.len - signed_part.len - 1};
    unsigned char sig[JWK_SIG_MAX + 3], mac[SIG_LEN];
    bool hs256_alg = false;
    jws_alg_t alg = JWS_ALG_OTHER;
    char kid[JWK_KID_MAX + 1];
    if (check_header(header, &hs256_alg, &alg, kid, sizeof kid, why) != 0)
        return -1;
    int siglen = jwt_b64url_decode(sig_text, sig, sizeof sig);
    if (siglen <= 0) {
        *why = "malformed token: the signature is not base64url";
        return -1;
    }
    if (hs256_alg) {
        bool good = false;
        if (v->nsecrets == 0) {
            *why = "HS256 tokens are not accepted: no shared secret is configured";
            return -1;
        }
        for (size_t i = 0; i < v->nsecrets && siglen == SIG_LEN; i++)
            if (hs256(v->secrets[i], signed_part, mac) && CRYPTO_memcmp(mac, sig, SIG_LEN) == 0)
                good = true;
        if (!good) {
            *why = "bad signature";
            return -1;
        }
    } else {
        int rc = check_key_signature(v, alg, kid, signed_part, sig, (size_t)siglen, why);
        if (rc != 0)
            return rc;
    }
    return check_claims(payload, v, now_s, claims, why);
}

int jwt_verify(span_t token, const span_t *secrets, size_t nsecrets, uint64_t now_s, jwt_claims_t *claims,
               const char **why)
{
    jwt_verifier_t v = {.secrets = secrets, .nsecrets = nsecrets};
    return jwt_verify_with(token, &v, now_s, claims, why);
}

int jwt_sign(const char *sub, bool admin, uint64_t exp, span_t secret, char *out, size_t outlen)
{
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    json_t *claims = json_pack("{s:s,s:I}", "sub", sub, "exp", (json_int_t)exp);
    if (claims && admin)
        json_object_set_new(claims, "role", json_string("admin"));
    char *payload = claims ? json_dumps(claims, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(claims);
    if (!payload)
        return -1;
    int rc = -1, h = b64url_encode((const unsigned char *)header, strlen(header), out, outlen);
    if (h < 0 || (size_t)h + 1 >= outlen)
        goto done;
    out[h] = '.';
    int p = b64url_encode((const unsigned char *)payload, strlen(payload), out + h + 1, outlen - (size_t)h - 1);
    if (p < 0 || (size_t)(h + 1 + p + 1) >= outlen)
        goto done;
    size_t signed_len = (size_t)(h + 1 + p);
    unsigned char mac[SIG_LEN];
    if (!hs256(secret, (span_t){out, signed_len}, mac))
        goto done;
    out[signed_len] = '.';
    int s = b64url_encode(mac, SIG_LEN, out + signed_len + 1, outlen - signed_len - 1);
    if (s >= 0)
        rc = (int)(signed_len + 1 + (size_t)s);
done:
    free(payload);
    return rc;
}

const char *jwt_secret_weakness(span_t secret)
{
    if (secret.len < JWT_SECRET_MIN_LEN)
        return "shorter than 32 bytes; HS256 needs at least 32 (RFC 7518 §3.2)";
    bool repeated = true, blank = true;
    for (size_t i = 0; i < secret.len; i++) {
        char c = secret.ptr[i];
        repeated = repeated && c == secret.ptr[0];
        blank = blank && (c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r');
    }
    if (repeated)
        return "one byte repeated: not a secret (at least 32 random bytes)";
    if (blank)
        return "whitespace only: not a secret (at least 32 random bytes)";
    return NULL;
}

int jwt_secrets_parse(span_t text, span_t secrets[JWT_SECRETS_MAX], char *err, size_t errlen)
{
    int n = 0, line = 0;
    size_t pos = 0;
    while (pos < text.len) {
        const char *start = text.ptr + pos;
        const char *nl = memchr(start, '\n', text.len - pos);
        size_t len = nl ? (size_t)(nl - start) : text.len - pos;
        pos += len + 1;
        line++;
        if (len && start[len - 1] == '\r')
            len--; /* a file written on Windows: the \r is not part of the secret */
        if (len == 0)
            continue;
        if (n == JWT_SECRETS_MAX) {
            snprintf(err, errlen, "at most %d JWT secrets", JWT_SECRETS_MAX);
            return -1;
        }
        const char *weak = jwt_secret_weakness((span_t){start, len});
        if (weak && len < JWT_SECRET_MIN_LEN) {
            snprintf(err, errlen, "the JWT secret on line %d is %zu bytes; HS256 needs at least %d (RFC 7518 §3.2)",
                     line, len, JWT_SECRET_MIN_LEN);
            return -1;
        }
        if (weak) {
            snprintf(err, errlen, "the JWT secret on line %d is refused: %s", line, weak);
            return -1;
        }
        secrets[n++] = (span_t){start, len};
    }
    if (n == 0)
        snprintf(err, errlen, "no JWT secret given");
    return n ? n : -1;
}
