/* forwarded.c — the client behind trusted proxies (see forwarded.h). */
#include "core/forwarded.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define HOPS_MAX 64       /* the right-most elements kept; a longer run of trusted hops is invalid */
#define NODE_TEXT_MAX 64  /* a node longer than this (after unquoting) is no address */
#define PORT_DIGITS_MAX 5 /* 65535 */
#define PORT_MAX 65535u
#define V4_MAPPED_BYTES 12

/* One element of the header, right-most last: for X-Forwarded-For the element itself, for
 * Forwarded its for= value as sent (a token or a quoted string). */
typedef struct {
    span_t node;
    bool has_node; /* a Forwarded element without for= has none */
} hop_t;

/* The last HOPS_MAX elements and how many there were in all. */
typedef struct {
    hop_t hop[HOPS_MAX];
    size_t total;
} hops_t;

static void hops_push(hops_t *h, span_t node, bool has_node)
{
    h->hop[h->total % HOPS_MAX] = (hop_t){node, has_node};
    h->total++;
}

int forwarded_kind_parse(const char *text, forwarded_kind_t *out)
{
    if (strcasecmp(text, "x-forwarded-for") == 0)
        *out = FORWARDED_X_FORWARDED_FOR;
    else if (strcasecmp(text, "forwarded") == 0)
        *out = FORWARDED_RFC7239;
    else
        return -1;
    return 0;
}

const char *forwarded_kind_name(forwarded_kind_t kind)
{
    return kind == FORWARDED_RFC7239 ? "Forwarded" : "X-Forwarded-For";
}

const char *forwarded_kind_header(forwarded_kind_t kind)
{
    return kind == FORWARDED_RFC7239 ? "forwarded" : "x-forwarded-for";
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* RFC 9110 §5.6.2 tchar. */
static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* RFC 9110 §5.6.4: qdtext, or the byte after a backslash. */
static bool is_qdtext(unsigned char c)
{
    return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e) || c >= 0x80;
}

static bool is_quoted_pair_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* X-Forwarded-For: comma-separated elements, OWS around them; empty elements are skipped (RFC 9110
 * §5.6.1). What an element holds is judged only if the walk reaches it. */
static void xff_line(span_t line, hops_t *h)
{
    size_t i = 0;
    while (i <= line.len) {
        size_t start = i;
        while (i < line.len && line.ptr[i] != ',')
            i++;
        size_t a = start, b = i;
        while (a < b && is_ows(line.ptr[a]))
            a++;
        while (b > a && is_ows(line.ptr[b - 1]))
            b--;
        if (b > a)
            hops_push(h, (span_t){line.ptr + a, b - a}, true);
        i++; /* past the comma (or the end) */
    }
}

/* Forwarded (RFC 7239 §4): elements separated by commas, pairs by semicolons, token=value with a
 * token or quoted-string value; for= at most once per element. OWS is taken around both separators,
 * as senders write it. A syntax error anywhere makes the header invalid: elements cannot be told
 * apart reliably past one. */
static bool rfc7239_line(span_t line, hops_t *h)
{
    const char *p = line.ptr, *end = line.ptr + line.len;
    for (;;) {
        while (p < end && is_ows(*p))
            p++;
        if (p == end)
            return true;
        if (*p == ',') { /* an empty element */
            p++;
            continue;
        }
        span_t node = {0};
        bool has_node = false;
        for (;;) { /* the pairs of one element */
            while (p < end && is_ows(*p))
                p++;
            if (p == end || *p == ',')
                break;
            if (*p == ';') {
                p++;
                continue;
            }
            const char *name = p;
            while (p < end && is_tchar((unsigned char)*p))
                p++;
            size_t name_len = (size_t)(p - name);
            if (name_len == 0 || p == end || *p != '=')
                return false;
            p++;
            const char *value = p;
            if (p < end && *p == '"') {
                p++;
                while (p < end && *p != '"') {
                    if (*p == '\\') {
                        if (p + 1 == end || !is_quoted_pair_char((unsigned char)p[1]))
                            return false;
                        p += 2;
                    } else if (is_qdtext((unsigned char)*p)) {
                        p++;
                    } else {
                        return false;
                    }
                }
                if (p == end)
                    return false; /* no closing quote */
                p++;
            } else {
                while (p < end && is_tchar((unsigned char)*p))
                    p++;
                if (p == value)
                    return false;
            }
            if (name_len == 3 && strncasecmp(name, "for", 3) == 0) {
                if (has_node)
                    return false; /* a parameter occurs at most once per element */
                has_node = true;
                node = (span_t){value, (size_t)(p - value)};
            }
            while (p < end && is_ows(*p))
                p++;
            if (p < end && *p != ';' && *p != ',')
                return false;
        }
        hops_push(h, node, has_node);
        if (p < end)
            p++; /* the comma */
    }
}

/* A port after a node: 1 to 5 digits, at most 65535 (an obfuscated port is not one). */
static bool port_ok(const char *p, size_t len)
{
    if (len == 0 || len > PORT_DIGITS_MAX)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    return v <= PORT_MAX;
}

/* a.b.c.d or x:y::z without brackets; an IPv4 text must have no colon, an IPv6 one must have one. */
static bool literal(const char *p, size_t len, bool v6, uint8_t out[NETALLOW_ADDR_LEN])
{
    if (len == 0 || (memchr(p, ':', len) != NULL) != v6 || memchr(p, '[', len) || memchr(p, ']', len))
        return false;
    return netallow_literal(p, len, out);
}

/* A node: a.b.c.d[:port] or [x:y::z][:port]; with bare_v6 (X-Forwarded-For) also x:y::z with no
 * port. "unknown" and "_obfuscated" are no address. */
static bool node_addr(const char *p, size_t len, bool bare_v6, uint8_t out[NETALLOW_ADDR_LEN])
{
    if (len == 0)
        return false;
    if (p[0] == '[') {
        const char *close = memchr(p, ']', len);
        if (!close)
            return false;
        size_t inner = (size_t)(close - p) - 1, after = len - inner - 2;
        if (after && (close[1] != ':' || !port_ok(close + 2, after - 1)))
            return false;
        return literal(p + 1, inner, true, out);
    }
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return literal(p, len, false, out);
    if (memchr(colon + 1, ':', len - (size_t)(colon - p) - 1))
        return bare_v6 && literal(p, len, true, out); /* two colons or more: IPv6, no port */
    size_t host = (size_t)(colon - p);
    return port_ok(colon + 1, len - host - 1) && literal(p, host, false, out);
}

/* A Forwarded for= value: a token as it is, a quoted string unescaped. */
static bool rfc7239_node_addr(span_t value, uint8_t out[NETALLOW_ADDR_LEN])
{
    char text[NODE_TEXT_MAX];
    size_t n = 0;
    if (value.len == 0)
        return false;
    if (value.ptr[0] != '"')
        return node_addr(value.ptr, value.len, false, out);
    for (size_t i = 1; i + 1 < value.len; i++) { /* inside the quotes (checked by the parser) */
        if (value.ptr[i] == '\\')
            i++;
        if (n == sizeof text)
            return false;
        text[n++] = value.ptr[i];
    }
    return node_addr(text, n, false, out);
}

bool forwarded_trusted(const netallow_t *trusted, const uint8_t addr[NETALLOW_ADDR_LEN])
{
    for (size_t i = 0; trusted && i < trusted->n; i++)
        if (netallow_contains(&trusted->cidr[i], addr))
            return true;
    return false;
}

forwarded_result_t forwarded_client(forwarded_kind_t kind, const span_t *lines, size_t nlines,
                                    const netallow_t *trusted, uint8_t out[NETALLOW_ADDR_LEN])
{
    static _Thread_local hops_t h; /* 1.5 KiB: kept off the HTTP threads' stacks */
    if (nlines == 0)
        return FORWARDED_NONE;
    if (nlines > FORWARDED_LINES_MAX)
        return FORWARDED_INVALID;
    h.total = 0;
    for (size_t i = 0; i < nlines; i++) {
        if (kind == FORWARDED_X_FORWARDED_FOR)
            xff_line(lines[i], &h);
        else if (!rfc7239_line(lines[i], &h))
            return FORWARDED_INVALID;
    }
    size_t kept = h.total < HOPS_MAX ? h.total : HOPS_MAX;
    for (size_t k = 0; k < kept; k++) {
        const hop_t *hop = &h.hop[(h.total - 1 - k) % HOPS_MAX];
        uint8_t addr[NETALLOW_ADDR_LEN];
        bool ok =
            hop->has_node && (kind == FORWARDED_X_FORWARDED_FOR ? node_addr(hop->node.ptr, hop->node.len, true, addr)
                                                                : rfc7239_node_addr(hop->node, addr));
        if (!ok)
            return FORWARDED_INVALID;
        if (!forwarded_trusted(trusted, addr)) {
            memcpy(out, addr, NETALLOW_ADDR_LEN);
            return FORWARDED_CLIENT;
        }
    }
    return FORWARDED_INVALID; /* no element, or every one kept a trusted proxy */
}

static bool is_mapped_v4(const uint8_t addr[NETALLOW_ADDR_LEN])
{
    static const uint8_t prefix[V4_MAPPED_BYTES] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(addr, prefix, V4_MAPPED_BYTES) == 0;
}

size_t forwarded_addr_text(const uint8_t addr[NETALLOW_ADDR_LEN], char out[FORWARDED_TEXT_MAX])
{
    bool v4 = is_mapped_v4(addr);
    if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? addr + V4_MAPPED_BYTES : addr, out, FORWARDED_TEXT_MAX)) {
        out[0] = '\0';
        return 0;
    }
    return strlen(out);
}

size_t forwarded_limit_key(const uint8_t addr[NETALLOW_ADDR_LEN], unsigned prefix_v6, char out[FORWARDED_KEY_MAX])
{
    if (is_mapped_v4(addr) || prefix_v6 >= NETALLOW_ADDR_LEN * 8)
        return forwarded_addr_text(addr, out);
    uint8_t net[NETALLOW_ADDR_LEN];
    memcpy(net, addr, NETALLOW_ADDR_LEN);
    for (unsigned bit = prefix_v6; bit < NETALLOW_ADDR_LEN * 8; bit++)
        net[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    char text[FORWARDED_TEXT_MAX];
    if (!inet_ntop(AF_INET6, net, text, sizeof text)) {
        out[0] = '\0';
        return 0;
    }
    int n = snprintf(out, FORWARDED_KEY_MAX, "%s/%u", text, prefix_v6);
    return n > 0 && n < FORWARDED_KEY_MAX ? (size_t)n : 0;
}

bool forwarded_is_loopback(const uint8_t addr[NETALLOW_ADDR_LEN])
{
    static const uint8_t v6_loopback[NETALLOW_ADDR_LEN] = {[15] = 1};
    return (is_mapped_v4(addr) && addr[V4_MAPPED_BYTES] == 127) || memcmp(addr, v6_loopback, NETALLOW_ADDR_LEN) == 0;
}
