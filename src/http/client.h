/* client.h — who a request comes from: the one place that computes a request's client address.
 * The peer's address, unless the peer is a trusted proxy (--trusted-proxies) that names the client
 * in the one header read (--real-ip-header). Every per-address limit (anonymous reads, live streams
 * per client), the access log, the metrics and development mode's loopback rule use it. */
#ifndef TALLY_HTTP_CLIENT_H
#define TALLY_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/forwarded.h"
#include "core/netallow.h"
#include "http/request.h"

#define CLIENT_PREFIX_V6_DEFAULT 64

/* The rules, from the flags. With no trusted range no header is ever read. */
typedef struct {
    netallow_t trusted;      /* --trusted-proxies */
    forwarded_kind_t header; /* --real-ip-header */
    unsigned prefix_v6;      /* --client-prefix-v6: IPv6 clients share a limit per prefix */
} client_rules_t;

typedef struct {
    bool known;                      /* false: the connection has no IP peer (the fields are "unknown") */
    bool forwarded;                  /* the address came from a trusted proxy's header */
    bool invalid;                    /* a trusted proxy sent a header that could not be used: the peer is taken */
    uint8_t addr[NETALLOW_ADDR_LEN]; /* the IPv6 form (IPv4 as ::ffff:a.b.c.d) */
    char text[FORWARDED_TEXT_MAX];   /* the address, for logs */
    size_t text_len;
    char key[FORWARDED_KEY_MAX]; /* what per-address limits count by: IPv6 cut to prefix_v6 */
    size_t key_len;
    char peer[FORWARDED_TEXT_MAX]; /* the proxy's address when forwarded (or invalid), else "" */
    size_t peer_len;
} http_client_t;

/* The client of req under rules. Pure apart from reading the request: the caller counts what it
 * wants to (dispatch.c counts invalid headers once per request). */
void http_client_of(const client_rules_t *rules, const http_request_t *req, http_client_t *out);

/* The key per-address limits count by, as a span into c. */
static inline span_t http_client_key(const http_client_t *c)
{
    return (span_t){c->key, c->key_len};
}

#endif
