/* client.c — a request's client address (see client.h). */
#include "http/client.h"

#include <string.h>

static void set_unknown(http_client_t *out)
{
    static const char unknown[] = "unknown";
    memcpy(out->text, unknown, sizeof unknown);
    out->text_len = sizeof unknown - 1;
    memcpy(out->key, unknown, sizeof unknown);
    out->key_len = sizeof unknown - 1;
}

void http_client_of(const client_rules_t *rules, const http_request_t *req, http_client_t *out)
{
    uint8_t peer[NETALLOW_ADDR_LEN];
    memset(out, 0, sizeof *out);
    if (!http_req_peer_addr(req, peer)) {
        set_unknown(out);
        return;
    }
    out->known = true;
    memcpy(out->addr, peer, NETALLOW_ADDR_LEN);
    if (rules && forwarded_trusted(&rules->trusted, peer)) {
        /* only a trusted peer's header is read; from anyone else it is whatever the client wrote */
        span_t lines[FORWARDED_LINES_MAX];
        size_t n = http_req_header_all(req, forwarded_kind_header(rules->header), lines, FORWARDED_LINES_MAX);
        uint8_t client[NETALLOW_ADDR_LEN];
        switch (forwarded_client(rules->header, lines, n, &rules->trusted, client)) {
        case FORWARDED_NONE:
            break; /* the proxy's own request (a health check), or a proxy that names no one */
        case FORWARDED_CLIENT:
            out->forwarded = true;
            memcpy(out->addr, client, NETALLOW_ADDR_LEN);
            break;
        case FORWARDED_INVALID:
            out->invalid = true;
            break;
        }
        if (out->forwarded || out->invalid)
            out->peer_len = forwarded_addr_text(peer, out->peer);
    }
    out->text_len = forwarded_addr_text(out->addr, out->text);
    out->key_len = forwarded_limit_key(out->addr, rules ? rules->prefix_v6 : CLIENT_PREFIX_V6_DEFAULT, out->key);
    if (out->text_len == 0 || out->key_len == 0)
        set_unknown(out);
}
