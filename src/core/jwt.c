/* jwt.c — HS256 verification and signing. */
#include "core/jwt.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>

#define SIG_LEN 32

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
static int b64url_decode(span_t in, unsigned char *out, size_t outcap)
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
    int n = b64url_decode(part, buf, sizeof buf);
    return n < 0 ? NULL : json_loadb((const char *)buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
}

static int check_header(span_t part)
{
    json_t *h = decode_json(part);
    const char *alg = json_string_value(json_object_get(h, "alg"));
    int rc = json_is_object(h) && alg && strcmp(alg, "HS256") == 0 ? 0 : -1;
    json_decref(h);
    return rc;
}

static int check_claims(span_t part, uint64_t now_s, jwt_claims_t *claims, const char **why)
{
    json_t *c = decode_json(part);
    json_t *sub = json_object_get(c, "sub"), *exp = json_object_get(c, "exp"), *nbf = json_object_get(c, "nbf");
    const char *role = json_string_value(json_object_get(c, "role"));
    int rc = -1;
    if (!json_is_object(c))
        *why = "the token's claims are not a JSON object";
    else if (!json_is_string(sub) || !id_valid((span_t){json_string_value(sub), json_string_length(sub)}))
        *why = "the token's sub is not a valid user id";
    else if (!json_is_number(exp))
        *why = "the token has no exp";
    else if (json_number_value(exp) <= (double)now_s)
        *why = "the token has expired";
    else if (nbf && (!json_is_number(nbf) || json_number_value(nbf) > (double)now_s))
        *why = "the token is not valid yet";
    else {
        snprintf(claims->sub, sizeof claims->sub, "%s", json_string_value(sub));
        claims->admin = role && strcmp(role, "admin") == 0;
        double e = json_number_value(exp); /* above now_s, so positive; clamp before converting */
        claims->exp = e >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)e;
        rc = 0;
    }
    json_decref(c);
    return rc;
}

int jwt_verify(span_t token, const span_t *secrets, size_t nsecrets, uint64_t now_s, jwt_claims_t *claims,
               const char **why)
{
    *why = "malformed token";
    if (token.len == 0 || token.len > JWT_MAX_LEN)
        return -1;
    const char *dot1 = memchr(token.ptr, '.', token.len);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', token.len - (size_t)(dot1 + 1 - token.ptr)) : NULL;
    if (!dot1 || !dot2 || memchr(dot2 + 1, '.', token.len - (size_t)(dot2 + 1 - token.ptr)))
        return -1;
    span_t header = {token.ptr, (size_t)(dot1 - token.ptr)};
    span_t payload = {dot1 + 1, (size_t)(dot2 - dot1 - 1)};
    span_t signed_part = {token.ptr, (size_t)(dot2 - token.ptr)};
    span_t sig_text = {dot2 + 1, token.len - signed_part.len - 1};
    unsigned char sig[SIG_LEN + 3], mac[SIG_LEN];
    if (check_header(header) != 0) {
        *why = "the token is not HS256";
        return -1;
    }
    if (b64url_decode(sig_text, sig, sizeof sig) != SIG_LEN)
        return -1;
    bool good = false;
    for (size_t i = 0; i < nsecrets; i++)
        if (hs256(secrets[i], signed_part, mac) && CRYPTO_memcmp(mac, sig, SIG_LEN) == 0)
            good = true;
    if (!good) {
        *why = "bad signature";
        return -1;
    }
    return check_claims(payload, now_s, claims, why);
}

int jwt_sign(const char *sub, bool admin, uint64_t exp, span_t secret, char *out, size_t outlen)
{
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    json_t *claims = json_pack("{s:s,s:I}", "sub", sub, "exp", (json_int_t)exp);
    if (claims && admin)
        json_object_set_new(claims, "role", json_string("admin"));
    char *payload = claims ? json_dumps(claims, JSON_COMPACT) : NULL;
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
        if (len < JWT_SECRET_MIN_LEN) {
            snprintf(err, errlen, "the JWT secret on line %d is %zu bytes; HS256 needs at least %d (RFC 7518 §3.2)",
                     line, len, JWT_SECRET_MIN_LEN);
            return -1;
        }
        secrets[n++] = (span_t){start, len};
    }
    if (n == 0)
        snprintf(err, errlen, "no JWT secret given");
    return n ? n : -1;
}
