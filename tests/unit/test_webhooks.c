/* test_webhooks.c — the pure parts of webhooks: CIDR ranges and the destination rule
 * (core/netallow.c), the Tally-Signature header (core/whsign.c), the webhook routes. */
#include <string.h>

#include "core/netallow.h"
#include "core/whsign.h"
#include "http/router.h"
#include "unit.h"

static bool permits(const netallow_t *allow, const char *literal)
{
    uint8_t a[NETALLOW_ADDR_LEN];
    if (!netallow_literal(literal, strlen(literal), a))
        return false;
    return netallow_permits(allow, a);
}

static bool in_range(const char *cidr, const char *literal)
{
    netallow_cidr_t c;
    uint8_t a[NETALLOW_ADDR_LEN];
    return netallow_parse_cidr(cidr, strlen(cidr), &c) == 0 && netallow_literal(literal, strlen(literal), a) &&
           netallow_contains(&c, a);
}

static void test_cidr(void)
{
    netallow_cidr_t c;
    CHECK(netallow_parse_cidr("10.0.0.0/8", 10, &c) == 0 && c.prefix == 8 + 96);
    CHECK(netallow_parse_cidr("fd00::/8", 8, &c) == 0 && c.prefix == 8);
    CHECK(netallow_parse_cidr("192.0.2.7", 9, &c) == 0 && c.prefix == 128);
    CHECK(netallow_parse_cidr("10.0.0.0/33", 11, &c) != 0);
    CHECK(netallow_parse_cidr("::/129", 6, &c) != 0);
    CHECK(netallow_parse_cidr("10.0.0.0/", 9, &c) != 0);
    CHECK(netallow_parse_cidr("10.0.0.0/x", 10, &c) != 0);
    CHECK(netallow_parse_cidr("example.com/8", 13, &c) != 0);
    CHECK(netallow_parse_cidr("", 0, &c) != 0);
    CHECK(in_range("10.1.0.0/16", "10.1.255.3") && !in_range("10.1.0.0/16", "10.2.0.1"));
    CHECK(in_range("10.1.2.3/16", "10.1.9.9")); /* host bits are cleared */
    CHECK(in_range("172.16.0.0/12", "172.31.255.255") && !in_range("172.16.0.0/12", "172.32.0.0"));
    CHECK(in_range("fe80::/10", "febf::1") && !in_range("fe80::/10", "fec0::1"));
    CHECK(in_range("0.0.0.0/0", "8.8.8.8") && !in_range("0.0.0.0/0", "2001:db8::1"));
    CHECK(in_range("::/0", "2001:db8::1") && in_range("::/0", "8.8.8.8")); /* v4 held as mapped v6 */

    netallow_t allow;
    char why[160];
    CHECK(netallow_parse(&allow, "127.0.0.0/8, ::1/128,10.9.0.0/16", why, sizeof why) == 0 && allow.n == 3);
    CHECK(netallow_parse(&allow, "127.0.0.0/8,nonsense", why, sizeof why) != 0 && strstr(why, "nonsense"));
    CHECK(netallow_parse(&allow, NULL, why, sizeof why) == 0 && allow.n == 0);
}

static void test_destinations(void)
{
    /* the defaults: public addresses yes, everything internal no */
    CHECK(permits(NULL, "93.184.216.34") && permits(NULL, "2606:2800:220:1:248:1893:25c8:1946"));
    static const char *const refused[] = {
        "127.0.0.1",
        "127.255.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "172.31.1.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "[::ffff:10.0.0.1]",
        "64:ff9b::a9fe:a9fe",
        "::127.0.0.1",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        bool ok = !permits(NULL, refused[i]);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  permitted by default: %s\n", refused[i]);
    }
    CHECK(permits(NULL, "172.32.0.1") && permits(NULL, "192.169.0.1") && permits(NULL, "100.128.0.1"));
    CHECK(permits(NULL, "::ffff:8.8.8.8"));
    /* --webhook-allow 127.0.0.0/8 lets loopback in, also in its mapped form, and nothing else */
    netallow_t allow;
    char why[160];
    CHECK(netallow_parse(&allow, "127.0.0.0/8", why, sizeof why) == 0);
    CHECK(permits(&allow, "127.0.0.1") && permits(&allow, "::ffff:127.0.0.1"));
    CHECK(!permits(&allow, "::1") && !permits(&allow, "10.0.0.1") && !permits(&allow, "169.254.169.254"));
    uint8_t a[NETALLOW_ADDR_LEN];
    CHECK(!netallow_literal("localhost", 9, a) && !netallow_literal("1.2.3", 5, a) && netallow_literal("[::1]", 5, a));
}

static void test_signature(void)
{
    /* expected values: Python's hmac.new(key, b"<t>.<body>", hashlib.sha256).hexdigest() */
    const char *body = "{\"a\":1}";
    char key[33];
    memset(key, 'k', 32);
    key[32] = '\0';
    char mac[WHSIGN_HEX_LEN + 1], header[WHSIGN_HEADER_MAX];
    CHECK(whsign_hmac_hex(span_of(key), 1700000000, span_of(body), mac) == 0);
    CHECK(strcmp(mac, "6935b796c0fec66e5dee52c86c7fd1218a424c32f1adb239ff2893c31e54f033") == 0);
    span_t keys[2] = {span_of(key), SPAN_LIT("old-secret-old-secret-old-secret")};
    CHECK(whsign_header(1700000000, span_of(body), keys, 1, header) == 0);
    CHECK(strcmp(header, "t=1700000000,v1=6935b796c0fec66e5dee52c86c7fd1218a424c32f1adb239ff2893c31e54f033") == 0);
    CHECK(whsign_header(1700000000, span_of(body), keys, 2, header) == 0);
    CHECK(strcmp(header, "t=1700000000,v1=6935b796c0fec66e5dee52c86c7fd1218a424c32f1adb239ff2893c31e54f033"
                         ",v1=d86416eb88e2afa81e0dde4ae92ce1d1f15ea732a9ec86ab27c2883cec8f50a6") == 0);
    CHECK(whsign_header(1700000000, span_of(body), keys, 0, header) != 0);
    CHECK(whsign_header(1700000000, span_of(body), keys, 3, header) != 0);
}

static void test_webhook_routes(void)
{
    route_t r;
    route_match(SPAN_LIT("/v1/admin/webhooks"), &r);
    CHECK(r.id == ROUTE_WEBHOOKS && route_is_admin(r.id) && route_allows(r.id, SPAN_LIT("POST")));
    route_match(SPAN_LIT("/v1/admin/webhooks/wh_1"), &r);
    CHECK(r.id == ROUTE_WEBHOOK && span_eq_str(r.item, "wh_1") && route_is_admin(r.id));
    CHECK(route_allows(ROUTE_WEBHOOK, SPAN_LIT("DELETE")) && !route_allows(ROUTE_WEBHOOK, SPAN_LIT("GET")));
    route_match(SPAN_LIT("/v1/admin/webhooks/wh_1/resume"), &r);
    CHECK(r.id == ROUTE_WEBHOOK_RESUME && span_eq_str(r.item, "wh_1"));
    route_match(SPAN_LIT("/v1/admin/webhooks/wh_1/secret?x=1"), &r);
    CHECK(r.id == ROUTE_WEBHOOK_SECRET && span_eq_str(r.item, "wh_1") && span_eq_str(r.query, "x=1"));
    route_match(SPAN_LIT("/v1/admin/webhooks/wh_1/other"), &r);
    CHECK(r.id == ROUTE_NOT_FOUND);
    route_match(SPAN_LIT("/v1/admin/webhooks//resume"), &r);
    CHECK(r.id == ROUTE_NOT_FOUND);
    route_match(SPAN_LIT("/v1/admin/webhooks/wh_1/resume/x"), &r);
    CHECK(r.id == ROUTE_NOT_FOUND);
}

void test_webhooks(void)
{
    test_cidr();
    test_destinations();
    test_signature();
    test_webhook_routes();
}
