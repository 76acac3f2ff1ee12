/* b64url.c — base64url (RFC 4648 §5, no padding), through OpenSSL's standard base64: below the
 * tokens (jwt.c) and the keys (jwk.c), which both decode it. */
#include "core/b64url.h"

#include <openssl/evp.h>

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
int b64url_decode(span_t in, unsigned char *out, size_t outcap)
{
    size_t padded = (in.len + 3) / 4 * 4;
    if (in.len % 4 == 1 || padded / 4 * 3 > outcap || padded > B64URL_TEXT_MAX)
        return -1;
    char buf[B64URL_TEXT_MAX + 4];
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

int b64url_encode(const unsigned char *in, size_t len, char *out, size_t outcap)
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
