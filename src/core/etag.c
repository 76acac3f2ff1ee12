/* etag.c — weak ETags from SHA-256, and the If-None-Match comparison. */
#include "core/etag.h"

#include <openssl/evp.h>
#include <string.h>

static const char B64URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t etag_weak(const void *body, size_t len, char out[ETAG_WEAK_SIZE])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    out[0] = '\0';
    if (!EVP_Digest(body, len, digest, &digest_len, EVP_sha256(), NULL) || digest_len < ETAG_DIGEST_BYTES)
        return 0;
    char *p = out;
    memcpy(p, "W/\"", 3);
    p += 3;
    /* 16 bytes: five groups of 3 (20 characters) and one byte left (2 characters), no padding. */
    size_t i = 0;
    for (; i + 3 <= ETAG_DIGEST_BYTES; i += 3) {
        unsigned v = (unsigned)digest[i] << 16 | (unsigned)digest[i + 1] << 8 | digest[i + 2];
        *p++ = B64URL[v >> 18 & 63];
        *p++ = B64URL[v >> 12 & 63];
        *p++ = B64URL[v >> 6 & 63];
        *p++ = B64URL[v & 63];
    }
    unsigned v = (unsigned)digest[i] << 16;
    *p++ = B64URL[v >> 18 & 63];
    *p++ = B64URL[v >> 12 & 63];
    *p++ = '"';
    *p = '\0';
    return (size_t)(p - out);
}

/* The opaque part of an entity tag: "x" or W/"x" → x (quotes excluded). */
static span_t opaque_of(span_t tag)
{
    if (tag.len >= 2 && tag.ptr[0] == 'W' && tag.ptr[1] == '/')
        tag = (span_t){tag.ptr + 2, tag.len - 2};
    if (tag.len < 2 || tag.ptr[0] != '"' || tag.ptr[tag.len - 1] != '"')
        return (span_t){0};
    return (span_t){tag.ptr + 1, tag.len - 2};
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

bool etag_none_match(span_t field, span_t etag)
{
    span_t want = opaque_of(etag);
    if (!want.ptr)
        return false;
    size_t i = 0;
    while (i < field.len && is_ows(field.ptr[i]))
        i++;
    size_t end = field.len;
    while (end > i && is_ows(field.ptr[end - 1]))
        end--;
    if (end - i == 1 && field.ptr[i] == '*')
        return true;
    while (i < end) {
        while (i < end && (is_ows(field.ptr[i]) || field.ptr[i] == ','))
            i++;
        if (i == end)
            break;
        size_t start = i;
        if (end - i >= 2 && field.ptr[i] == 'W' && field.ptr[i + 1] == '/')
            i += 2;
        if (i == end || field.ptr[i] != '"')
            return false;
        const char *close = memchr(field.ptr + i + 1, '"', end - i - 1);
        if (!close)
            return false;
        i = (size_t)(close - field.ptr) + 1;
        if (span_eq(opaque_of((span_t){field.ptr + start, i - start}), want))
            return true;
        while (i < end && is_ows(field.ptr[i]))
            i++;
        if (i < end && field.ptr[i] != ',')
            return false;
    }
    return false;
}
