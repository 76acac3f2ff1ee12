/* fuzz_jwk.c — libFuzzer target for jwk_set_parse (core/jwk.h), the JWK Set an identity provider
 * serves (--jwt-keys, --jwt-jwks-url), and for jwt_verify_with (core/jwt.h) against a fixed set of
 * an RSA, an EC P-256 and an Ed25519 key: the bearer tokens of a server in identity-provider mode. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/jwk.h"
#include "core/jwt.h"
#include "fuzz.h"

/* The first input byte picks the mode (its low bit: '0' or '1' in the seed files). */
enum {
    MODE_SET,   /* the rest is a JWK Set */
    MODE_TOKEN, /* the rest is a token, verified against the fixed set */
};

#define NOW_S 1800000000ull
#define NOTES_MAX 512

/* Public keys only; the seed tokens in fuzz/corpus/fuzz_jwk were signed by their private halves. */
static const char fixed_set[] =
    "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"3KQmAXd4d3IhrYyu7cCSuZ8zp9CtrpSGjl1y55sSqrJMfF0ggOIfczDFuKT0dqGCVMnKRqbvN"
    "fmurdyB8BeD0HidaR0FFFu_9rtSPN-6C3Ci6FH3yOSL4CLI4gPDl22qM4wjfPR10jV0y4TACiXdUKwfitPBDFiKm0Pn53jxXJhZc"
    "Cajbq8nswO7ODnU0lqa9VZpuS6vga-B8g4iRThNQ9ZC6BlGjfKTnQ0-hnW55ty2msOhNrMe1fcFAzs4_eagX7yLnFrzHfhxSqbq7"
    "mXsoAmIBhS66YesXLnTT_5e4yWnMoLdQvrdy4w9iHItfgH4wLe8hzCXEmEhZEV8QjTG1Q\",\"e\":\"AQAB\",\"kid\":\"rsa\",\"use\":"
    "\"sig\"},{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"sNjhj_yRVjpzrzV0Ab5eJEuNHmIkuMjpSVUcMZH_1CE\",\"y\":\"B1pO2mEc_"
    "phk"
    "zWdXDXAYopZ9zbw0cfQERuP4lluqtdc\",\"kid\":\"ec\",\"use\":\"sig\"},{\"x\":\"Xe5jdnrlObiAGs81qUNW4jc50Klu2ueRiPI2P"
    "UXmP2Q\",\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"ed\",\"use\":\"sig\"}]}";

static void check_set(span_t text)
{
    char notes[NOTES_MAX], err[256] = "";
    memset(notes, 'x', sizeof notes);
    jwk_set_t *set = jwk_set_parse(text, notes, sizeof notes, err, sizeof err);
    FUZZ_ASSERT(memchr(notes, '\0', sizeof notes) != NULL); /* cut, never overrun */
    if (!set) {
        FUZZ_ASSERT(err[0] != '\0');
        return;
    }
    size_t n = jwk_set_count(set);
    FUZZ_ASSERT(n >= 1 && n <= JWK_KEYS_MAX);
    for (size_t i = 0; i < n; i++) {
        const jwk_t *k = jwk_set_key(set, i);
        const char *kid = jwk_kid(k);
        FUZZ_ASSERT(strlen(kid) <= JWK_KID_MAX);
        if (kid[0])
            FUZZ_ASSERT(jwk_set_find(set, kid) == k); /* kids are unique within a set */
        /* each key fits exactly the algorithms of its type */
        int fits = 0;
        for (int a = JWS_ALG_RS256; a < JWS_ALG_OTHER; a++)
            fits += jwk_fits(k, (jws_alg_t)a);
        FUZZ_ASSERT(fits >= 1 && fits <= (jwk_type(k) == JWK_RSA ? 2 : 1));
        FUZZ_ASSERT(!jwk_fits(k, JWS_ALG_OTHER));
        /* a signature of the wrong length or junk never verifies */
        static const unsigned char junk[64] = {1};
        for (int a = JWS_ALG_RS256; a < JWS_ALG_OTHER; a++)
            FUZZ_ASSERT(!jwk_verify(k, (jws_alg_t)a, SPAN_LIT("x.y"), junk, sizeof junk));
    }
    jwk_set_free(set);
}

static void check_token(span_t token)
{
    static jwk_set_t *set;
    char notes[NOTES_MAX], err[256];
    if (!set)
        set = jwk_set_parse(SPAN_LIT(fixed_set), notes, sizeof notes, err, sizeof err);
    FUZZ_ASSERT(set && jwk_set_count(set) == 3);
    const jwk_set_t *sets[] = {set};
    jwt_verifier_t v = {.sets = sets, .nsets = 1, .issuer = "https://idp.example", .audience = "tally"};
    jwt_claims_t claims;
    const char *why = NULL;
    memset(&claims, 0x55, sizeof claims);
    int rc = jwt_verify_with(token, &v, NOW_S, &claims, &why);
    FUZZ_ASSERT(rc == 0 || rc == -1 || rc == JWT_UNKNOWN_KID);
    if (rc != 0) {
        FUZZ_ASSERT(why && why[0] != '\0');
        return;
    }
    FUZZ_ASSERT(id_valid(span_of(claims.sub)));
    FUZZ_ASSERT(claims.exp > NOW_S);
    /* accepted: the same token with a changed signature character is refused */
    const char *dot2 = memrchr(token.ptr, '.', token.len);
    FUZZ_ASSERT(dot2 && dot2 + 1 < token.ptr + token.len);
    char *copy = malloc(token.len);
    if (!copy)
        abort();
    memcpy(copy, token.ptr, token.len);
    size_t at = (size_t)(dot2 + 1 - token.ptr);
    copy[at] = copy[at] == 'A' ? 'B' : 'A';
    FUZZ_ASSERT(jwt_verify_with((span_t){copy, token.len}, &v, NOW_S, &claims, &why) != 0);
    /* and without the key sets, or HS256 secrets only, nothing verifies it */
    v.nsets = 0;
    FUZZ_ASSERT(jwt_verify_with(token, &v, NOW_S, &claims, &why) != 0);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    span_t input = {(const char *)data + 1, size - 1};
    if ((data[0] & 1) == MODE_SET)
        check_set(input);
    else
        check_token(input);
    return 0;
}
