/* test_forwarded.c — the client behind trusted proxies (core/forwarded.c). */
#include <string.h>

#include "core/forwarded.h"
#include "unit.h"

/* The client's address as text from one or more header lines ("|" separates lines), or "peer"
 * when the header is invalid, or "none" when there is no line. */
static const char *client(forwarded_kind_t kind, const char *trusted_list, const char *joined)
{
    static char text[FORWARDED_TEXT_MAX + 8];
    static char copy[512];
    netallow_t trusted;
    char why[160];
    if (netallow_parse(&trusted, trusted_list, why, sizeof why) != 0)
        return "bad list";
    span_t lines[FORWARDED_LINES_MAX + 4];
    size_t n = 0;
    if (joined) {
        snprintf(copy, sizeof copy, "%s", joined);
        for (char *p = copy, *bar; n < sizeof lines / sizeof lines[0]; p = bar + 1) {
            bar = strchr(p, '|');
            lines[n++] = (span_t){p, bar ? (size_t)(bar - p) : strlen(p)};
            if (!bar)
                break;
        }
    }
    uint8_t addr[NETALLOW_ADDR_LEN];
    forwarded_result_t r = forwarded_client(kind, lines, n, &trusted, addr);
    if (r == FORWARDED_NONE)
        return "none";
    if (r == FORWARDED_INVALID)
        return "peer";
    forwarded_addr_text(addr, text);
    return text;
}

#define XFF(trusted, header, want) CHECK(strcmp(client(FORWARDED_X_FORWARDED_FOR, trusted, header), want) == 0)
#define FWD(trusted, header, want) CHECK(strcmp(client(FORWARDED_RFC7239, trusted, header), want) == 0)

static void test_xff(void)
{
    const char *t = "10.0.0.0/8,2001:db8:ffff::/48";
    XFF(t, NULL, "none");
    XFF(t, "203.0.113.7", "203.0.113.7");
    /* the right-most untrusted, never the left-most a client wrote */
    XFF(t, "1.1.1.1, 203.0.113.7", "203.0.113.7");
    XFF(t, "1.1.1.1, 203.0.113.7, 10.0.0.2", "203.0.113.7");
    XFF(t, "1.1.1.1,203.0.113.7,10.0.0.2,10.9.9.9", "203.0.113.7");
    /* garbage left of the client is never read */
    XFF(t, "not an address, unknown, 203.0.113.7, 10.0.0.2", "203.0.113.7");
    /* lines joined in order: the last line's last element is the right-most */
    XFF(t, "1.1.1.1|203.0.113.7|10.0.0.2", "203.0.113.7");
    XFF(t, "203.0.113.7, 10.0.0.2|10.0.0.3", "203.0.113.7");
    XFF(t, "10.0.0.3|203.0.113.7", "203.0.113.7");
    /* empty elements and lines are skipped; a header with no element is invalid */
    XFF(t, " , 203.0.113.7 ,, ", "203.0.113.7");
    XFF(t, "203.0.113.7||", "203.0.113.7");
    XFF(t, "", "peer");
    XFF(t, " , ", "peer");
    /* every address trusted: no client left */
    XFF(t, "10.0.0.1, 10.0.0.2", "peer");
    /* unknown, obfuscated, malformed on the walk: invalid */
    XFF(t, "203.0.113.7, unknown", "peer");
    XFF(t, "_hidden", "peer");
    XFF(t, "203.0.113.7, _hidden, 10.0.0.2", "peer");
    XFF(t, "1.2.3", "peer");
    XFF(t, "1.2.3.4.5", "peer");
    XFF(t, "256.1.1.1", "peer");
    XFF(t, "1.2.3.4 5.6.7.8", "peer");
    XFF(t, "example.com", "peer");
    XFF(t, "\"203.0.113.7\"", "peer");
    XFF(t, "[1.2.3.4]", "peer");
    XFF(t, "fe80::1%eth0", "peer");
    /* ports */
    XFF(t, "203.0.113.7:4711", "203.0.113.7");
    XFF(t, "203.0.113.7:", "peer");
    XFF(t, "203.0.113.7:65536", "peer");
    XFF(t, "203.0.113.7:_port", "peer");
    /* IPv6: bare, bracketed, with a port; trusted IPv6 hops skipped */
    XFF(t, "2001:db8::1", "2001:db8::1");
    XFF(t, "[2001:db8::1]", "2001:db8::1");
    XFF(t, "[2001:db8::1]:443", "2001:db8::1");
    XFF(t, "[2001:db8::1]:", "peer");
    XFF(t, "[2001:db8::1", "peer");
    XFF(t, "2001:db8::1, 2001:db8:ffff::9", "2001:db8::1");
    XFF(t, "[2001:db8::1]x", "peer");
    /* IPv4-mapped IPv6 is IPv4, and judged against IPv4 ranges */
    XFF(t, "::ffff:203.0.113.7", "203.0.113.7");
    XFF(t, "203.0.113.7, ::ffff:10.0.0.2", "203.0.113.7");
    /* no trusted ranges: the right-most is the client */
    XFF("", "1.1.1.1, 203.0.113.7", "203.0.113.7");
    /* more lines than are read: invalid */
    char many[512] = "";
    for (int i = 0; i <= FORWARDED_LINES_MAX; i++)
        strcat(many, i ? "|1.2.3.4" : "1.2.3.4");
    XFF(t, many, "peer");
}

static void test_rfc7239(void)
{
    const char *t = "10.0.0.0/8";
    FWD(t, "for=203.0.113.7", "203.0.113.7");
    FWD(t, "For=203.0.113.7;proto=https;by=10.0.0.2", "203.0.113.7");
    FWD(t, "for=1.1.1.1, for=203.0.113.7, for=10.0.0.2", "203.0.113.7");
    FWD(t, "for=1.1.1.1;proto=http|for=203.0.113.7|for=10.0.0.2", "203.0.113.7");
    FWD(t, "for=\"203.0.113.7:4711\"", "203.0.113.7");
    FWD(t, "for=\"[2001:db8::1]\"", "2001:db8::1");
    FWD(t, "for=\"[2001:db8::1]:4711\"", "2001:db8::1");
    FWD(t, "for=\"\\[2001:db8::1\\]\"", "2001:db8::1"); /* quoted-pairs unescaped */
    FWD(t, "for = 203.0.113.7", "peer");
    FWD(t, "for=203.0.113.7 ; proto=https , for=10.0.0.2", "203.0.113.7");
    /* not allowed unquoted: a colon or brackets are not token characters */
    FWD(t, "for=203.0.113.7:4711", "peer");
    FWD(t, "for=[2001:db8::1]", "peer");
    /* IPv6 without brackets is not a node */
    FWD(t, "for=\"2001:db8::1\"", "peer");
    /* unknown and obfuscated */
    FWD(t, "for=unknown", "peer");
    FWD(t, "for=\"unknown\"", "peer");
    FWD(t, "for=_hidden", "peer");
    FWD(t, "for=\"_hidden:_port\"", "peer");
    FWD(t, "for=\"203.0.113.7:_port\"", "peer");
    FWD(t, "for=203.0.113.7, for=unknown", "peer");
    /* left of the client, unknown does not matter (it is never read) */
    FWD(t, "for=unknown, for=203.0.113.7", "203.0.113.7");
    /* an element without for= on the walk; a parameter twice; syntax anywhere */
    FWD(t, "for=203.0.113.7, proto=https", "peer");
    FWD(t, "for=1.1.1.1;for=203.0.113.7", "peer");
    FWD(t, "for=\"203.0.113.7", "peer");
    FWD(t, "for=", "peer");
    FWD(t, "=203.0.113.7", "peer");
    FWD(t, "for=203.0.113.7 junk", "peer");
    FWD(t, "for=\"1,2\", for=203.0.113.7", "203.0.113.7"); /* a comma inside quotes splits nothing */
    FWD(t, "garbage\", for=203.0.113.7", "peer");
    FWD(t, "for=10.0.0.1, for=10.0.0.2", "peer");
    FWD(t, "", "peer");
    FWD(t, ",,", "peer");
    /* the other header's syntax is not this one's */
    FWD(t, "203.0.113.7", "peer");
    XFF(t, "for=203.0.113.7", "peer");
}

static void test_texts(void)
{
    forwarded_kind_t k;
    CHECK(forwarded_kind_parse("X-Forwarded-For", &k) == 0 && k == FORWARDED_X_FORWARDED_FOR);
    CHECK(forwarded_kind_parse("forwarded", &k) == 0 && k == FORWARDED_RFC7239);
    CHECK(forwarded_kind_parse("x-real-ip", &k) != 0);
    CHECK(strcmp(forwarded_kind_header(FORWARDED_RFC7239), "forwarded") == 0);

    uint8_t a[NETALLOW_ADDR_LEN];
    char key[FORWARDED_KEY_MAX];
    CHECK(netallow_literal("2001:db8:1:2:3:4:5:6", 20, a));
    CHECK(forwarded_limit_key(a, 64, key) > 0 && strcmp(key, "2001:db8:1:2::/64") == 0);
    CHECK(forwarded_limit_key(a, 48, key) > 0 && strcmp(key, "2001:db8:1::/48") == 0);
    CHECK(forwarded_limit_key(a, 128, key) > 0 && strcmp(key, "2001:db8:1:2:3:4:5:6") == 0);
    uint8_t b[NETALLOW_ADDR_LEN];
    CHECK(netallow_literal("2001:db8:1:2:ffff::1", 20, b));
    char key_b[FORWARDED_KEY_MAX];
    CHECK(forwarded_limit_key(b, 64, key_b) > 0 && strcmp(key, key_b) != 0); /* 128 above */
    forwarded_limit_key(a, 64, key);
    CHECK(strcmp(key, key_b) == 0); /* one /64, one bucket */
    CHECK(netallow_literal("203.0.113.7", 11, a));
    CHECK(forwarded_limit_key(a, 64, key) > 0 && strcmp(key, "203.0.113.7") == 0);
    CHECK(forwarded_is_loopback(a) == false);
    CHECK(netallow_literal("127.0.0.3", 9, a) && forwarded_is_loopback(a));
    CHECK(netallow_literal("::1", 3, a) && forwarded_is_loopback(a));
    CHECK(netallow_literal("::2", 3, a) && !forwarded_is_loopback(a));
}

void test_forwarded(void)
{
    test_xff();
    test_rfc7239();
    test_texts();
}
