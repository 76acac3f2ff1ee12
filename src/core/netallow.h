/* netallow.h — where a webhook may connect: CIDR ranges (IPv4 and IPv6), the ranges refused by
 * default (loopback, link-local, private, unique-local, unspecified, multicast, reserved) and the
 * decision for one address. Pure: addresses in, a yes or no out. IPv4 addresses are held as
 * IPv4-mapped IPv6 (::ffff:a.b.c.d), so one comparison covers both families and a mapped form
 * cannot slip past a rule written for IPv4. */
#ifndef TALLY_CORE_NETALLOW_H
#define TALLY_CORE_NETALLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NETALLOW_MAX 64 /* ranges in one --webhook-allow list */
#define NETALLOW_ADDR_LEN 16

typedef struct {
    uint8_t addr[NETALLOW_ADDR_LEN]; /* the network, bits past prefix zero */
    unsigned prefix;                 /* 0..128, over the IPv6 form */
} netallow_cidr_t;

/* Ranges explicitly allowed (--webhook-allow): they win over the default refusals. */
typedef struct {
    size_t n;
    netallow_cidr_t cidr[NETALLOW_MAX];
} netallow_t;

/* Parses "CIDR[,CIDR…]" (a.b.c.d/n, x:y::z/n, or a bare address for one host) into out; an empty
 * or NULL list allows nothing extra. Returns 0, or -1 with why filled. */
int netallow_parse(netallow_t *out, const char *list, char *why, size_t whylen);

/* One range (or a bare address) into out. Returns 0, or -1. */
int netallow_parse_cidr(const char *text, size_t len, netallow_cidr_t *out);

/* An IP literal (a.b.c.d, x:y::z, or [x:y::z] as in a URL) in the IPv6 form. Returns true when host
 * is one. */
bool netallow_literal(const char *host, size_t len, uint8_t out[NETALLOW_ADDR_LEN]);

/* The IPv6 form of a socket address of family AF_INET (4 bytes) or AF_INET6 (16 bytes). */
void netallow_from_v4(const uint8_t v4[4], uint8_t out[NETALLOW_ADDR_LEN]);

/* True when addr is inside cidr. */
bool netallow_contains(const netallow_cidr_t *cidr, const uint8_t addr[NETALLOW_ADDR_LEN]);

/* True when a webhook may connect to addr: inside an allowed range, or outside every range refused
 * by default. IPv4 embedded in IPv6 (mapped ::ffff:0:0/96, NAT64 64:ff9b::/96, compatible ::/96)
 * is judged as the IPv4 address it carries. allow may be NULL (the defaults only). */
bool netallow_permits(const netallow_t *allow, const uint8_t addr[NETALLOW_ADDR_LEN]);

#endif
