/* parse.c — small parsers for flags, headers and query strings. No allocation, no I/O. */
#include "core/parse.h"

#include <stdio.h>
#include <stdlib.h>

#define DURATION_MAX_MS (365ull * 86400 * 1000)

int parse_uint(span_t text, uint64_t max, uint64_t *value)
{
    if (text.len == 0 || text.len > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < text.len; i++) {
        unsigned char c = (unsigned char)text.ptr[i];
        if (c < '0' || c > '9')
            return -1;
        unsigned digit = c - '0';
        if (digit > max || v > (max - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    *value = v;
    return 0;
}

int parse_duration_ms(const char *text, uint64_t *ms)
{
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    if (strcmp(text, "0") == 0) {
        *ms = 0;
        return 0;
    }
    size_t len = strlen(text);
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        size_t slen = strlen(units[u].suffix);
        if (len <= slen || strcmp(text + len - slen, units[u].suffix) != 0)
            continue;
        uint64_t n;
        if (parse_uint((span_t){text, len - slen}, DURATION_MAX_MS / units[u].ms, &n) != 0)
            return -1;
        *ms = n * units[u].ms;
        return 0;
    }
    return -1;
}

int parse_size_bytes(const char *text, uint64_t *bytes)
{
    static const char units[] = "KMGT";
    size_t len = strlen(text);
    unsigned shift = 0;
    /* An optional "iB" or "B" after a multiple K, M, G or T; a plain "B" after digits. */
    if (len >= 3 && strcmp(text + len - 2, "iB") == 0 && memchr(units, text[len - 3], 4))
        len -= 2;
    else if (len >= 2 && text[len - 1] == 'B')
        len -= 1;
    const char *u = len ? memchr(units, text[len - 1], 4) : NULL;
    if (u) {
        shift = 10 * (unsigned)(u - units + 1);
        len--;
    }
    uint64_t n;
    if (parse_uint((span_t){text, len}, UINT64_MAX >> shift, &n) != 0)
        return -1;
    *bytes = n << shift;
    return 0;
}

int parse_listen(const char *text, char host[LISTEN_HOST_MAX + 1], uint16_t *port)
{
    const char *colon = strrchr(text, ':');
    if (!colon)
        return -1;
    const char *h = text;
    size_t hlen = (size_t)(colon - text);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    } else if (memchr(h, ':', hlen)) {
        return -1; /* a bare IPv6 address needs brackets */
    }
    if (hlen == 0 || hlen > LISTEN_HOST_MAX)
        return -1;
    uint64_t p;
    if (parse_uint(span_of(colon + 1), UINT16_MAX, &p) != 0)
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (uint16_t)p;
    return 0;
}

static bool printable_ascii(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e;
}

int parse_idempotency_key(span_t header, char key[IDEM_KEY_MAX + 1])
{
    size_t n = 0;
    if (header.len >= 1 && header.ptr[0] == '"') {
        /* RFC 8941 sf-string: "…" with \" and \\ as the only escapes, printable ASCII inside. */
        if (header.len < 2 || header.ptr[header.len - 1] != '"')
            return -1;
        for (size_t i = 1; i + 1 < header.len; i++) {
            unsigned char c = (unsigned char)header.ptr[i];
            if (c == '\\') {
                if (i + 2 >= header.len)
                    return -1;
                c = (unsigned char)header.ptr[++i];
                if (c != '"' && c != '\\')
                    return -1;
            } else if (c == '"' || !printable_ascii(c)) {
                return -1;
            }
            if (n == IDEM_KEY_MAX)
                return -1;
            key[n++] = (char)c;
        }
    } else {
        for (size_t i = 0; i < header.len; i++) {
            unsigned char c = (unsigned char)header.ptr[i];
            if (!printable_ascii(c) || n == IDEM_KEY_MAX)
                return -1;
            key[n++] = (char)c;
        }
    }
    if (n == 0)
        return -1;
    key[n] = '\0';
    return (int)n;
}

static span_t span_trim(span_t s)
{
    while (s.len && (s.ptr[0] == ' ' || s.ptr[0] == '\t')) {
        s.ptr++;
        s.len--;
    }
    while (s.len && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t'))
        s.len--;
    return s;
}

int parse_if_match(span_t header, if_match_t *out)
{
    if_match_t m = {0};
    span_t trimmed = span_trim(header);
    if (span_eq_str(trimmed, "*")) {
        m.any = true;
        *out = m;
        return 0;
    }
    size_t pos = 0;
    span_t tag;
    while (parse_list_next(header, &pos, &tag)) {
        tag = span_trim(tag);
        if (tag.len < 3 || tag.ptr[0] != '"' || tag.ptr[tag.len - 1] != '"' || m.count == IF_MATCH_MAX_TAGS)
            return -1;
        if (parse_uint((span_t){tag.ptr + 1, tag.len - 2}, UINT64_MAX, &m.versions[m.count]) != 0)
            return -1;
        m.count++;
    }
    if (m.count == 0)
        return -1;
    *out = m;
    return 0;
}

bool if_match_holds(const if_match_t *m, uint64_t version)
{
    if (m->any)
        return version > 0;
    for (int i = 0; i < m->count; i++)
        if (m->versions[i] == version)
            return true;
    return false;
}

bool parse_list_next(span_t list, size_t *pos, span_t *elem)
{
    if (*pos > list.len)
        return false;
    const char *start = list.ptr + *pos;
    size_t rest = list.len - *pos;
    const char *comma = rest ? memchr(start, ',', rest) : NULL;
    size_t n = comma ? (size_t)(comma - start) : rest;
    *elem = (span_t){start, n};
    *pos += n + 1; /* past the comma; past the end when there was none */
    return true;
}

bool parse_query_param(span_t query, const char *name, span_t *value)
{
    size_t name_len = strlen(name);
    size_t pos = 0;
    while (pos <= query.len) {
        const char *start = query.ptr + pos;
        size_t rest = query.len - pos;
        const char *amp = rest ? memchr(start, '&', rest) : NULL;
        size_t n = amp ? (size_t)(amp - start) : rest;
        if (n > name_len && memcmp(start, name, name_len) == 0 && start[name_len] == '=') {
            *value = (span_t){start + name_len + 1, n - name_len - 1};
            return true;
        }
        if (n == name_len && memcmp(start, name, name_len) == 0) {
            *value = (span_t){start + n, 0};
            return true;
        }
        pos += n + 1;
    }
    return false;
}
