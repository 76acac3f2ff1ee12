/* test_jwt.c — the HS256 tokens tally signs and verifies (core/jwt.h): rotation, expiry, the forms refused. */
#include <string.h>

#include "core/jwt.h"
#include "unit.h"

void test_jwt(void)
{
    char token[JWT_MAX_LEN];
    span_t secret = SPAN_LIT("s3cret"), other = SPAN_LIT("other");
    jwt_claims_t c;
    const char *why;
    int n = jwt_sign("bob", false, 2000, secret, token, sizeof token);
    CHECK(n > 0 && strchr(token, '=') == NULL);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &secret, 1, 1000, &c, &why) == 0);
    CHECK(strcmp(c.sub, "bob") == 0 && !c.admin && c.exp == 2000);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &other, 1, 1000, &c, &why) != 0);
    span_t both[2] = {other, secret}; /* rotation: any listed secret verifies */
    CHECK(jwt_verify((span_t){token, (size_t)n}, both, 2, 1000, &c, &why) == 0);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &secret, 1, 2000, &c, &why) != 0); /* expired */
    n = jwt_sign("ops", true, 2000, secret, token, sizeof token);
    CHECK(jwt_verify((span_t){token, (size_t)n}, &secret, 1, 1000, &c, &why) == 0 && c.admin);
    /* A flipped signature byte, a truncated token, alg none, and junk are refused. */
    char bad[JWT_MAX_LEN];
    memcpy(bad, token, (size_t)n);
    bad[n - 2] = bad[n - 2] == 'A' ? 'B' : 'A';
    CHECK(jwt_verify((span_t){bad, (size_t)n}, &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify((span_t){token, (size_t)n - 1}, &secret, 1, 1000, &c, &why) != 0);
    const char none[] = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IiLCJleHAiOjk5OTk5OTk5OTl9.";
    CHECK(jwt_verify(SPAN_LIT(none), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT("a.b.c"), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT("a.b"), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT("a.b.c.d"), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_verify(SPAN_LIT(""), &secret, 1, 1000, &c, &why) != 0);
    CHECK(jwt_sign("not a valid id", false, 2000, secret, token, sizeof token) > 0);
    CHECK(jwt_verify(span_of(token), &secret, 1, 1000, &c, &why) != 0); /* sub must be a valid user id */

    /* The signature's last character carries 2 unused bits (43 characters for 32 bytes): a lax
     * decoder maps four characters to the same bytes, so the token could be changed and still
     * verify. Only the canonical one (unused bits zero) is taken; and no padding, no whitespace. */
    n = jwt_sign("bob", false, 2000, secret, token, sizeof token);
    memcpy(bad, token, (size_t)n);
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int last = (int)(strchr(alphabet, token[n - 1]) - alphabet);
    CHECK((last & 3) == 0); /* jwt_sign writes the canonical form */
    for (int low = 1; low < 4; low++) {
        bad[n - 1] = alphabet[last | low];
        CHECK(jwt_verify((span_t){bad, (size_t)n}, &secret, 1, 1000, &c, &why) != 0);
    }
    bad[n - 1] = token[n - 1];
    CHECK(jwt_verify((span_t){bad, (size_t)n}, &secret, 1, 1000, &c, &why) == 0);
    bad[n] = '=';
    CHECK(jwt_verify((span_t){bad, (size_t)n + 1}, &secret, 1, 1000, &c, &why) != 0);
    bad[n] = ' ';
    CHECK(jwt_verify((span_t){bad, (size_t)n + 1}, &secret, 1, 1000, &c, &why) != 0);
    bad[n] = '\n';
    CHECK(jwt_verify((span_t){bad, (size_t)n + 1}, &secret, 1, 1000, &c, &why) != 0);

    span_t s[JWT_SECRETS_MAX];
    char err[256];
#define K32 "0123456789abcdef0123456789abcdef" /* 32 bytes: the shortest secret taken */
    CHECK(jwt_secrets_parse(SPAN_LIT(K32 "\n"), s, err, sizeof err) == 1 && span_eq_str(s[0], K32));
    CHECK(jwt_secrets_parse(SPAN_LIT("new" K32 "\nold" K32 "\n"), s, err, sizeof err) == 2 &&
          span_eq_str(s[1], "old" K32));
    CHECK(jwt_secrets_parse(SPAN_LIT("a" K32 "\n\nb" K32), s, err, sizeof err) == 2);
    /* \r\n line ends (a file written on Windows) */
    CHECK(jwt_secrets_parse(SPAN_LIT("a" K32 "\r\nb" K32 "\r\n"), s, err, sizeof err) == 2 &&
          span_eq_str(s[0], "a" K32) && span_eq_str(s[1], "b" K32));
    CHECK(jwt_secrets_parse(SPAN_LIT("\n"), s, err, sizeof err) == -1 && strstr(err, "no JWT secret"));
    CHECK(jwt_secrets_parse(SPAN_LIT(""), s, err, sizeof err) == -1);
    CHECK(jwt_secrets_parse(SPAN_LIT("\r\n"), s, err, sizeof err) == -1);
    CHECK(jwt_secrets_parse(SPAN_LIT(K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32 "\n" K32), s,
                            err, sizeof err) == -1 &&
          strstr(err, "at most"));
    /* RFC 7518 §3.2: at least 256 bits; a weak line anywhere refuses the whole set */
    CHECK(jwt_secrets_parse(SPAN_LIT("a"), s, err, sizeof err) == -1 && strstr(err, "at least 32"));
    CHECK(jwt_secrets_parse(SPAN_LIT(" "), s, err, sizeof err) == -1 && strstr(err, "line 1"));
    CHECK(jwt_secrets_parse(SPAN_LIT("0123456789abcdef0123456789abcde\r\n"), s, err, sizeof err) == -1);
    CHECK(jwt_secrets_parse(SPAN_LIT(K32 "\nshort\n"), s, err, sizeof err) == -1 && strstr(err, "line 2"));
#undef K32
}
