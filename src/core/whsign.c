/* whsign.c — webhook signatures with OpenSSL's HMAC (see whsign.h). */
#include "core/whsign.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHA256_LEN 32
#define T_DIGITS_MAX 21 /* a uint64 and the dot */

int whsign_hmac_hex(span_t key, uint64_t t, span_t body, char out[WHSIGN_HEX_LEN + 1])
{
    char prefix[T_DIGITS_MAX + 1];
    int n = snprintf(prefix, sizeof prefix, "%llu.", (unsigned long long)t);
    unsigned char mac[SHA256_LEN];
    size_t mac_len = 0;
    /* streamed: "<t>." then the body, never copied into one message */
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
    static const unsigned char empty_key[1];
    bool ok = ctx && EVP_MAC_init(ctx, key.len ? (const unsigned char *)key.ptr : empty_key, key.len, params) == 1 &&
              EVP_MAC_update(ctx, (const unsigned char *)prefix, (size_t)n) == 1 &&
              (!body.len || EVP_MAC_update(ctx, (const unsigned char *)body.ptr, body.len) == 1) &&
              EVP_MAC_final(ctx, mac, &mac_len, sizeof mac) == 1;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(hmac);
    if (!ok || mac_len != SHA256_LEN)
        return -1;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < SHA256_LEN; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 0xf];
    }
    out[WHSIGN_HEX_LEN] = '\0';
    return 0;
}

int whsign_header(uint64_t t, span_t body, const span_t *keys, size_t nkeys, char out[WHSIGN_HEADER_MAX])
{
    if (nkeys == 0 || nkeys > WHSIGN_KEYS_MAX)
        return -1;
    size_t pos = (size_t)snprintf(out, WHSIGN_HEADER_MAX, "t=%llu", (unsigned long long)t);
    for (size_t i = 0; i < nkeys; i++) {
        char mac[WHSIGN_HEX_LEN + 1];
        if (whsign_hmac_hex(keys[i], t, body, mac) != 0)
            return -1;
        pos += (size_t)snprintf(out + pos, WHSIGN_HEADER_MAX - pos, ",v1=%s", mac);
    }
    return 0;
}
