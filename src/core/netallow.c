/* netallow.c — CIDR ranges and the webhook destination rule (see netallow.h). */
#include "core/netallow.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#define V4_IN_V6_PREFIX 96 /* an IPv4 prefix n is n + 96 over the mapped form */
#define V4_BITS 32
#define V6_BITS 128
#define LITERAL_MAX 64 /* longer text is no address */

/* Refused unless allowed: written as text, parsed once per check (a few dozen, cheap enough for a
 * connection attempt, and impossible to get out of step with this list). */
static const char *const refused_by_default[] = {
    "0.0.0.0/8",      /* "this network", 0.0.0.0 reaches the local host */
    "10.0.0.0/8",     /* private */
    "100.64.0.0/10",  /* shared address space (carrier-grade NAT) */
    "127.0.0.0/8",    /* loopback */
    "169.254.0.0/16", /* link-local: the cloud metadata service */
    "172.16.0.0/12",  /* private */
    "192.0.0.0/24",   /* IETF protocol assignments */
    "192.168.0.0/16", /* private */
    "198.18.0.0/15",  /* benchmarking */
    "224.0.0.0/4",    /* multicast */
    "240.0.0.0/4",    /* reserved, and the broadcast address */
    "::/128",         /* unspecified */
    "::1/128",        /* loopback */
    "fe80::/10",      /* link-local */
    "fec0::/10",      /* site-local (deprecated, still routed by some) */
    "fc00::/7",       /* unique-local */
    "ff00::/8",       /* multicast */
    /* IPv6 forms that carry an IPv4 address not unwrapped below: refused whole (allow them explicitly) */
    "64:ff9b:1::/48",  /* local-use NAT64 (RFC 8215): a translator may reach any private IPv4 */
    "::ffff:0:0:0/96", /* SIIT (RFC 6052 §2.1's ::ffff:0:a.b.c.d) */
    "2002::/16",       /* 6to4: 2002:AABB:CCDD:: embeds a.b.c.d */
    "2001::/32",       /* Teredo: embeds the client's IPv4 */
};

void netallow_from_v4(const uint8_t v4[4], uint8_t out[NETALLOW_ADDR_LEN])
{
    memset(out, 0, NETALLOW_ADDR_LEN);
    out[10] = 0xff;
    out[11] = 0xff;
    memcpy(out + 12, v4, 4);
}

bool netallow_literal(const char *host, size_t len, uint8_t out[NETALLOW_ADDR_LEN])
{
    char text[LITERAL_MAX];
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
    }
    if (len == 0 || len >= sizeof text)
        return false;
    memcpy(text, host, len);
    text[len] = '\0';
    uint8_t v4[4];
    if (inet_pton(AF_INET, text, v4) == 1) {
        netallow_from_v4(v4, out);
        return true;
    }
    return inet_pton(AF_INET6, text, out) == 1;
}

int netallow_parse_cidr(const char *text, size_t len, netallow_cidr_t *out)
{
    const char *slash = memchr(text, '/', len);
    size_t addr_len = slash ? (size_t)(slash - text) : len;
    if (addr_len == 0 || (addr_len >= 2 && text[0] == '['))
        return -1;
    uint8_t addr[NETALLOW_ADDR_LEN];
    if (!netallow_literal(text, addr_len, addr))
        return -1;
    bool v4 = memchr(text, ':', addr_len) == NULL;
    unsigned max = v4 ? V4_BITS : V6_BITS, prefix = max;
    if (slash) {
        size_t digits = len - addr_len - 1;
        if (digits == 0 || digits > 3)
            return -1;
        prefix = 0;
        for (size_t i = 0; i < digits; i++) {
            char c = slash[1 + i];
            if (c < '0' || c > '9')
                return -1;
            prefix = prefix * 10 + (unsigned)(c - '0');
        }
        if (prefix > max)
            return -1;
    }
    if (v4)
        prefix += V4_IN_V6_PREFIX;
    for (unsigned bit = prefix; bit < V6_BITS; bit++) /* the network: bits past the prefix cleared */
        addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    memcpy(out->addr, addr, NETALLOW_ADDR_LEN);
    out->prefix = prefix;
    return 0;
}

int netallow_parse(netallow_t *out, const char *list, char *why, size_t whylen)
{
    out->n = 0;
    if (!list)
        return 0;
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ')) {
            p++;
            len--;
        }
        while (len && p[len - 1] == ' ')
            len--;
        if (out->n == NETALLOW_MAX) {
            snprintf(why, whylen, "at most %d ranges", NETALLOW_MAX);
            return -1;
        }
        if (netallow_parse_cidr(p, len, &out->cidr[out->n]) != 0) {
            snprintf(why, whylen, "\"%.*s\" is not a CIDR range such as 10.1.0.0/16 or fd00::/8", (int)len, p);
            return -1;
        }
        out->n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

bool netallow_contains(const netallow_cidr_t *cidr, const uint8_t addr[NETALLOW_ADDR_LEN])
{
    unsigned full = cidr->prefix / 8, rest = cidr->prefix % 8;
    if (memcmp(cidr->addr, addr, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (cidr->addr[full] & mask) == (addr[full] & mask);
}

/* The IPv4 address an IPv6 address carries (mapped, NAT64 well-known prefix, compatible), in the
 * mapped form; other addresses as they are. */
static void unwrap_v4(const uint8_t in[NETALLOW_ADDR_LEN], uint8_t out[NETALLOW_ADDR_LEN])
{
    static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const uint8_t zeros[12] = {0};
    memcpy(out, in, NETALLOW_ADDR_LEN);
    bool compatible = memcmp(in, zeros, 12) == 0 && (in[12] | in[13] | in[14]) != 0; /* not :: nor ::1 */
    if (memcmp(in, nat64, 12) == 0 || compatible)
        netallow_from_v4(in + 12, out);
}

bool netallow_permits(const netallow_t *allow, const uint8_t addr[NETALLOW_ADDR_LEN])
{
    uint8_t a[NETALLOW_ADDR_LEN];
    unwrap_v4(addr, a);
    for (size_t i = 0; allow && i < allow->n; i++)
        if (netallow_contains(&allow->cidr[i], a))
            return true;
    for (size_t i = 0; i < sizeof refused_by_default / sizeof refused_by_default[0]; i++) {
        netallow_cidr_t c;
        const char *text = refused_by_default[i];
        if (netallow_parse_cidr(text, strlen(text), &c) == 0 && netallow_contains(&c, a))
            return false;
    }
    return true;
}
