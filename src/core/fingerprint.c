/* fingerprint.c — SHA-256 request fingerprints (OpenSSL EVP). */
#include "core/fingerprint.h"

#include <openssl/evp.h>

static int digest_part(EVP_MD_CTX *ctx, span_t part)
{
    uint8_t len_be[8];
    uint64_t n = part.len;
    for (int i = 7; i >= 0; i--, n >>= 8)
        len_be[i] = (uint8_t)n;
    return EVP_DigestUpdate(ctx, len_be, sizeof len_be) && (part.len == 0 || EVP_DigestUpdate(ctx, part.ptr, part.len));
}

int fingerprint_request(span_t method, span_t path, span_t body, uint8_t out[FINGERPRINT_LEN])
{
    int rc = -1;
    unsigned int out_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -1;
    if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
        goto done;
    if (!digest_part(ctx, method) || !digest_part(ctx, path) || !digest_part(ctx, body))
        goto done;
    if (!EVP_DigestFinal_ex(ctx, out, &out_len) || out_len != FINGERPRINT_LEN)
        goto done;
    rc = 0;
done:
    EVP_MD_CTX_free(ctx);
    return rc;
}
