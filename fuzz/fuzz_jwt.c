/* fuzz_jwt.c — libFuzzer target for jwt_verify, jwt_sign and jwt_secrets_parse (core/jwt.h): the bearer
 * token of every authenticated request, and the secret file. */
#include <jansson.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/jwt.h"
#include "fuzz.h"

/* The first input byte picks the mode (its low two bits: '0'..'3' in the seed files). */
enum {
    MODE_TOKEN,   /* the rest is a token, verified as it is */
    MODE_SIGNED,  /* "HEADER\nPAYLOAD" JSON texts, encoded and signed here: verification reaches the claims */
    MODE_SIGN,    /* flags byte, 8 bytes exp, then sub: jwt_sign, then jwt_verify */
    MODE_SECRETS, /* the rest is a secret file */
};

#define NOW_S 1800000000ull
#define SIG_LEN 32
#define SIG_TEXT_LEN 43               /* 32 bytes in base64url without padding */
#define EXACT_DOUBLE_MAX (1ull << 53) /* up to here a JSON number's value is the integer itself */
#define B64_LEN(n) (((n) + 2) / 3 * 4)
#define TOKEN_CAP (2 * B64_LEN(JWT_MAX_LEN) + SIG_TEXT_LEN + 2) /* two parts of up to JWT_MAX_LEN bytes, signed */

static const span_t secrets[] = {SPAN_LIT("s3cret-one-of-32-bytes-at-least.."),
                                 SPAN_LIT("rotated-two-of-32-bytes-at-least")};
#define NSECRETS (sizeof secrets / sizeof secrets[0])

static const char b64url_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url without padding, written here rather than taken from OpenSSL, as the reference. */
static size_t b64url_encode(const unsigned char *in, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v =
            (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < len ? in[i + 2] : 0);
        size_t chars = len - i >= 3 ? 4 : len - i + 1;
        for (size_t c = 0; c < chars; c++)
            out[n++] = b64url_alphabet[(v >> (18 - 6 * c)) & 63];
    }
    return n;
}

/* Decodes canonical base64url without padding: the unused low bits of the last character must be
 * zero (else four texts would decode to one signature). Returns the length, or -1. */
static int b64url_decode(span_t in, unsigned char *out, size_t cap)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    if (in.len % 4 == 1)
        return -1;
    for (size_t i = 0; i < in.len; i++) {
        const char *p = memchr(b64url_alphabet, in.ptr[i], 64);
        if (!p)
            return -1;
        acc = acc << 6 | (uint32_t)(p - b64url_alphabet);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -1;
            out[n++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return acc == 0 ? (int)n : -1; /* what is left are the unused bits */
}

static void hs256(span_t secret, span_t data, unsigned char mac[SIG_LEN])
{
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), secret.ptr, (int)secret.len, (const unsigned char *)data.ptr, data.len, mac, &len) ||
        len != SIG_LEN)
        abort();
}

/* Whatever was accepted carries a signature that decodes to the MAC of its first two parts under one
 * of the secrets, and claims that hold. */
static void check_accepted(span_t token, const jwt_claims_t *claims)
{
    const char *dot2 = memrchr(token.ptr, '.', token.len);
    FUZZ_ASSERT(dot2 != NULL);
    span_t signed_part = {token.ptr, (size_t)(dot2 - token.ptr)};
    unsigned char sig[SIG_LEN + 3], mac[SIG_LEN];
    FUZZ_ASSERT(b64url_decode((span_t){dot2 + 1, token.len - signed_part.len - 1}, sig, sizeof sig) == SIG_LEN);
    bool signed_by_one = false;
    for (size_t i = 0; i < NSECRETS; i++) {
        hs256(secrets[i], signed_part, mac);
        signed_by_one = signed_by_one || memcmp(mac, sig, SIG_LEN) == 0;
    }
    FUZZ_ASSERT(signed_by_one);
    FUZZ_ASSERT(id_valid(span_of(claims->sub)));
    FUZZ_ASSERT(claims->exp >= NOW_S);
}

static int verify(span_t token, const span_t *keys, size_t nkeys, jwt_claims_t *claims)
{
    const char *why = NULL;
    memset(claims, 0x55, sizeof *claims);
    int rc = jwt_verify(token, keys, nkeys, NOW_S, claims, &why);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    if (rc == 0)
        check_accepted(token, claims);
    else
        FUZZ_ASSERT(why && why[0] != '\0');
    return rc;
}

/* What jwt_verify should decide about a correctly signed token with these decoded parts. */
static bool ref_claims(span_t header, span_t payload, jwt_claims_t *want, double *exp_value)
{
    json_t *h = json_loadb(header.ptr, header.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *c = json_loadb(payload.ptr, payload.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *alg = json_object_get(h, "alg"), *sub = json_object_get(c, "sub"), *exp = json_object_get(c, "exp");
    json_t *nbf = json_object_get(c, "nbf"), *role = json_object_get(c, "role");
    const json_t *kid = json_object_get(h, "kid");
    bool ok = json_is_object(h) && json_is_string(alg) && json_string_length(alg) == 5 &&
              strcmp(json_string_value(alg), "HS256") == 0 &&
              !json_object_get(h, "crit") && /* no JWS extension is understood */
              (!kid || (json_is_string(kid) && json_string_length(kid) <= JWK_KID_MAX &&
                        strlen(json_string_value(kid)) == json_string_length(kid))) &&
              json_is_object(c) && json_is_string(sub) &&
              id_valid((span_t){json_string_value(sub), json_string_length(sub)}) && json_is_number(exp) &&
              json_number_value(exp) > (double)NOW_S &&
              (!nbf || (json_is_number(nbf) && json_number_value(nbf) <= (double)NOW_S));
    if (ok) {
        snprintf(want->sub, sizeof want->sub, "%s", json_string_value(sub));
        /* a string equal to "admin", or an array holding that string */
        want->admin =
            json_is_string(role) && json_string_length(role) == 5 && memcmp(json_string_value(role), "admin", 5) == 0;
        for (size_t i = 0; json_is_array(role) && i < json_array_size(role); i++) {
            const json_t *e = json_array_get(role, i);
            want->admin = want->admin || (json_is_string(e) && json_string_length(e) == 5 &&
                                          memcmp(json_string_value(e), "admin", 5) == 0);
        }
        *exp_value = json_number_value(exp);
    }
    json_decref(h);
    json_decref(c);
    return ok;
}

static void check_signed(span_t input)
{
    const char *nl = memchr(input.ptr, '\n', input.len);
    span_t header = {input.ptr, nl ? (size_t)(nl - input.ptr) : input.len};
    span_t payload = nl ? (span_t){nl + 1, input.len - header.len - 1} : SPAN_LIT("");
    if (header.len > JWT_MAX_LEN || payload.len > JWT_MAX_LEN)
        return;
    char *token = malloc(TOKEN_CAP);
    if (!token)
        abort();
    size_t n = b64url_encode((const unsigned char *)header.ptr, header.len, token);
    token[n++] = '.';
    n += b64url_encode((const unsigned char *)payload.ptr, payload.len, token + n);
    unsigned char mac[SIG_LEN];
    hs256(secrets[0], (span_t){token, n}, mac);
    token[n++] = '.';
    n += b64url_encode(mac, SIG_LEN, token + n);
    span_t tok = {token, n};

    jwt_claims_t got, want = {0};
    double exp_value = 0;
    int rc = verify(tok, secrets, NSECRETS, &got);
    bool ok = tok.len <= JWT_MAX_LEN && ref_claims(header, payload, &want, &exp_value);
    FUZZ_ASSERT((rc == 0) == ok);
    if (ok) {
        FUZZ_ASSERT(strcmp(got.sub, want.sub) == 0);
        FUZZ_ASSERT(got.admin == want.admin);
        if (exp_value < (double)EXACT_DOUBLE_MAX)
            FUZZ_ASSERT(got.exp == (uint64_t)exp_value);
        /* The same token under other secrets, or with its signature changed, is refused. */
        FUZZ_ASSERT(verify(tok, secrets + 1, NSECRETS - 1, &got) == -1);
        /* The last character carries 2 unused bits: setting one gives the same bytes to a lax decoder. */
        char last = token[n - 1];
        const char *at = memchr(b64url_alphabet, last, 64);
        token[n - 1] = b64url_alphabet[(at - b64url_alphabet) ^ 1];
        FUZZ_ASSERT(verify(tok, secrets, NSECRETS, &got) == -1);
        token[n - 1] = last;
        token[n - SIG_TEXT_LEN] = token[n - SIG_TEXT_LEN] == 'A' ? 'B' : 'A';
        FUZZ_ASSERT(verify(tok, secrets, NSECRETS, &got) == -1);
    }
    free(token);
}

static void check_sign(span_t input)
{
    if (input.len < 9)
        return;
    uint8_t flags = (uint8_t)input.ptr[0];
    uint64_t exp;
    memcpy(&exp, input.ptr + 1, sizeof exp);
    char *sub = fuzz_cstring((const uint8_t *)input.ptr + 9, input.len - 9);
    bool admin = flags & 1;
    size_t outlen = flags & 2 ? (size_t)(flags >> 2) : JWT_MAX_LEN + 1; /* short buffers: cut, never overrun */
    char *out = malloc(outlen ? outlen : 1);
    if (!out)
        abort();
    int n = jwt_sign(sub, admin, exp, secrets[1], out, outlen);
    FUZZ_ASSERT(n >= -1);
    bool valid = id_valid(span_of(sub)) && exp > NOW_S && exp <= INT64_MAX;
    if (!(flags & 2) && id_valid(span_of(sub)))
        FUZZ_ASSERT(n > 0); /* any valid sub fits in a JWT_MAX_LEN buffer */
    if (n > 0) {
        FUZZ_ASSERT((size_t)n < outlen && out[n] == '\0' && strlen(out) == (size_t)n);
        jwt_claims_t claims;
        int rc = verify((span_t){out, (size_t)n}, secrets, NSECRETS, &claims);
        FUZZ_ASSERT((rc == 0) == valid);
        if (rc == 0) {
            FUZZ_ASSERT(strcmp(claims.sub, sub) == 0 && claims.admin == admin);
            if (exp <= EXACT_DOUBLE_MAX)
                FUZZ_ASSERT(claims.exp == exp);
        }
    }
    free(out);
    free(sub);
}

/* One byte repeated, or whitespace only: not a secret whatever its length. */
static bool weak(const char *p, size_t len)
{
    bool repeated = true, blank = true;
    for (size_t i = 0; i < len; i++) {
        repeated = repeated && p[i] == p[0];
        blank = blank && strchr(" \t\v\f\r", p[i]) != NULL && p[i] != '\0';
    }
    return repeated || blank;
}

static void check_secrets(span_t text)
{
    span_t got[JWT_SECRETS_MAX];
    char err[256] = "";
    int n = jwt_secrets_parse(text, got, err, sizeof err);
    /* Reference: the lines without their \n or \r\n; empty ones skipped; each at least
     * JWT_SECRET_MIN_LEN bytes and not weak, at most JWT_SECRETS_MAX of them, at least one. */
    int want = 0;
    bool refused = false;
    size_t start = 0;
    for (size_t i = 0; i <= text.len && !refused; i++) {
        if (i < text.len && text.ptr[i] != '\n')
            continue;
        size_t len = i - start;
        if (len && text.ptr[start + len - 1] == '\r')
            len--;
        if (len) {
            refused = want == JWT_SECRETS_MAX || len < JWT_SECRET_MIN_LEN || weak(text.ptr + start, len);
            if (!refused && n >= 0) {
                FUZZ_ASSERT(want < n);
                FUZZ_ASSERT(got[want].ptr == text.ptr + start && got[want].len == len);
                FUZZ_ASSERT(memchr(got[want].ptr, '\n', got[want].len) == NULL);
            }
            want += !refused;
        }
        start = i + 1;
    }
    FUZZ_ASSERT(n == (refused || want == 0 ? -1 : want));
    if (n < 0)
        FUZZ_ASSERT(err[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    span_t input = {(const char *)data + 1, size - 1};
    jwt_claims_t claims;
    switch (data[0] & 3) {
    case MODE_TOKEN:
        verify(input, secrets, NSECRETS, &claims);
        break;
    case MODE_SIGNED:
        check_signed(input);
        break;
    case MODE_SIGN:
        check_sign(input);
        break;
    case MODE_SECRETS:
        check_secrets(input);
        break;
    }
    return 0;
}
