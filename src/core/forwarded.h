/* forwarded.h — the client behind trusted proxies: X-Forwarded-For and RFC 7239 Forwarded. Pure:
 * header lines, the trusted ranges and the peer in; the client's address, or why none, out.
 *
 * The rule is nginx's realip with recursion: walk the addresses right to left (the right-most was
 * written by the proxy that talks to us) and take the first one that is not itself a trusted
 * proxy. Anything left of it was written by the client and is never read, so a client cannot pick
 * its own address. A malformed element on the way, `unknown`, an obfuscated identifier, or no
 * untrusted address at all make the whole header invalid: the caller then uses the peer. */
#ifndef TALLY_CORE_FORWARDED_H
#define TALLY_CORE_FORWARDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/netallow.h"
#include "core/span.h"

#define FORWARDED_LINES_MAX 32 /* header lines read at most; more make the header invalid */

typedef enum {
    FORWARDED_X_FORWARDED_FOR, /* X-Forwarded-For: 203.0.113.7, 10.0.0.2 */
    FORWARDED_RFC7239,         /* Forwarded: for=203.0.113.7;proto=https, for="[2001:db8::1]:443" */
} forwarded_kind_t;

typedef enum {
    FORWARDED_NONE,    /* no header line: the peer is the client */
    FORWARDED_CLIENT,  /* out holds the client's address */
    FORWARDED_INVALID, /* malformed, unknown, obfuscated, or every address trusted: use the peer */
} forwarded_result_t;

/* Parses "x-forwarded-for" or "forwarded" (any case). Returns 0, or -1. */
int forwarded_kind_parse(const char *text, forwarded_kind_t *out);

/* The header's name as sent ("X-Forwarded-For", "Forwarded") and in lower case (for lookups). */
const char *forwarded_kind_name(forwarded_kind_t kind);
const char *forwarded_kind_header(forwarded_kind_t kind);

/* The client's address (the IPv6 form of netallow.h: IPv4 and IPv4-mapped alike ::ffff:a.b.c.d)
 * from the header's lines in the order received, as if joined with commas. nlines past
 * FORWARDED_LINES_MAX: invalid. trusted: the ranges of the proxies whose entries are skipped. */
forwarded_result_t forwarded_client(forwarded_kind_t kind, const span_t *lines, size_t nlines,
                                    const netallow_t *trusted, uint8_t out[NETALLOW_ADDR_LEN]);

/* True when addr (IPv6 form) is in one of the ranges. */
bool forwarded_trusted(const netallow_t *trusted, const uint8_t addr[NETALLOW_ADDR_LEN]);

/* addr (IPv6 form) as text: a.b.c.d for IPv4 (mapped included), else RFC 5952 IPv6. Returns the
 * length (out has room for 46 bytes with the NUL). */
#define FORWARDED_TEXT_MAX 46
size_t forwarded_addr_text(const uint8_t addr[NETALLOW_ADDR_LEN], char out[FORWARDED_TEXT_MAX]);

/* The key per-address limits use: IPv4 addresses as they are; IPv6 ones cut to their first
 * prefix_v6 bits, written "2001:db8:1:2::/64" (the whole address when prefix_v6 is 128). Returns the
 * length (out has room for 50 bytes with the NUL). */
#define FORWARDED_KEY_MAX 50
size_t forwarded_limit_key(const uint8_t addr[NETALLOW_ADDR_LEN], unsigned prefix_v6, char out[FORWARDED_KEY_MAX]);

/* True for 127.0.0.0/8 (mapped included) and ::1. */
bool forwarded_is_loopback(const uint8_t addr[NETALLOW_ADDR_LEN]);

#endif
