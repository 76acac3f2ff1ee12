/* test_idp.c — tokens from an identity provider: JWK Set parsing, the four signature algorithms
 * (keys and signatures made here with OpenSSL), ES256's r‖s → DER, claim paths, issuer, audience,
 * crit, HS256 secret strength, and the key state's reload (authkeys.h) under verifying threads. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/jwk.h"
#include "core/jwt.h"
#include "engine/authkeys.h"
#include "unit.h"

#define NOW 1800000000ull
#define TOKEN_MAX (JWT_MAX_LEN + 1)

static void b64url(const unsigned char *in, size_t len, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t n = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v =
            (unsigned)in[i] << 16 | (i + 1 < len ? (unsigned)in[i + 1] << 8 : 0) | (i + 2 < len ? in[i + 2] : 0);
        size_t chars = len - i >= 3 ? 4 : len - i + 1;
        for (size_t c = 0; c < chars; c++)
            out[n++] = a[(v >> (18 - 6 * c)) & 63];
    }
    out[n] = '\0';
}

static void bn_param(EVP_PKEY *k, const char *name, char *out)
{
    BIGNUM *bn = NULL;
    unsigned char buf[1024];
    EVP_PKEY_get_bn_param(k, name, &bn);
    int n = BN_bn2bin(bn, buf);
    b64url(buf, (size_t)n, out);
    BN_free(bn);
}

/* The public JWK of k (kid and extra members as given). */
static void jwk_of(EVP_PKEY *k, const char *kid, const char *extra, char *out, size_t cap)
{
    char a[1400], b[200];
    if (EVP_PKEY_is_a(k, "RSA")) {
        bn_param(k, OSSL_PKEY_PARAM_RSA_N, a);
        bn_param(k, OSSL_PKEY_PARAM_RSA_E, b);
        snprintf(out, cap, "{\"kty\":\"RSA\",\"kid\":\"%s\",\"n\":\"%s\",\"e\":\"%s\"%s}", kid, a, b, extra);
    } else if (EVP_PKEY_is_a(k, "EC")) {
        unsigned char pt[65];
        size_t len = 0;
        EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, pt, sizeof pt, &len);
        b64url(pt + 1, 32, a);
        b64url(pt + 33, 32, b);
        snprintf(out, cap, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"%s\",\"x\":\"%s\",\"y\":\"%s\"%s}", kid, a, b,
                 extra);
    } else {
        unsigned char raw[32];
        size_t len = sizeof raw;
        EVP_PKEY_get_raw_public_key(k, raw, &len);
        b64url(raw, len, a);
        snprintf(out, cap, "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"%s\",\"x\":\"%s\"%s}", kid, a, extra);
    }
}

/* A token with this header and these claims, signed by k with alg. Returns its length. */
static size_t sign_token(EVP_PKEY *k, const char *alg, const char *header, const char *claims, char *out)
{
    char *p = out;
    b64url((const unsigned char *)header, strlen(header), p);
    p += strlen(p);
    *p++ = '.';
    b64url((const unsigned char *)claims, strlen(claims), p);
    p += strlen(p);
    size_t signed_len = (size_t)(p - out);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    bool eddsa = strcmp(alg, "EdDSA") == 0;
    EVP_DigestSignInit(md, &pctx, eddsa ? NULL : EVP_sha256(), NULL, k);
    if (strcmp(alg, "PS256") == 0) {
        EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING);
        EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST);
    }
    unsigned char sig[1024];
    size_t siglen = sizeof sig;
    EVP_DigestSign(md, sig, &siglen, (const unsigned char *)out, signed_len);
    EVP_MD_CTX_free(md);
    if (strcmp(alg, "ES256") == 0) { /* DER → r‖s */
        const unsigned char *d = sig;
        ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &d, (long)siglen);
        const BIGNUM *r, *s;
        ECDSA_SIG_get0(es, &r, &s);
        BN_bn2binpad(r, sig, 32);
        BN_bn2binpad(s, sig + 32, 32);
        siglen = 64;
        ECDSA_SIG_free(es);
    }
    *p++ = '.';
    b64url(sig, siglen, p);
    return strlen(out);
}

static EVP_PKEY *rsa_key, *rsa_small, *ec_key, *ed_key;

static void keys_make(void)
{
    rsa_key = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    rsa_small = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024);
    ec_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    ed_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
}

static void test_es256_der(void)
{
    unsigned char rs[64] = {0}, der[JWK_ES256_DER_MAX];
    rs[31] = 1;
    rs[63] = 2;
    static const unsigned char small[] = {0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x02};
    CHECK(jwk_es256_sig_to_der(rs, der, sizeof der) == (int)sizeof small && memcmp(der, small, sizeof small) == 0);
    memset(rs, 0xff, sizeof rs); /* high bit set: each INTEGER gets a leading zero byte, 33 bytes */
    int n = jwk_es256_sig_to_der(rs, der, sizeof der);
    CHECK(n == 2 + 2 * (2 + 33) && der[0] == 0x30 && der[1] == 70 && der[2] == 0x02 && der[3] == 33 && der[4] == 0 &&
          der[5] == 0xff);
    CHECK(jwk_es256_sig_to_der(rs, der, 10) == -1); /* does not fit */
}

static void test_jwk_parse(void)
{
    static char text[16384], a[2048], b[2048], c[2048], d[2048], e[2048];
    char notes[1024], err[256];
    jwk_of(rsa_key, "r1", ",\"use\":\"sig\"", a, sizeof a);
    jwk_of(ec_key, "e1", ",\"alg\":\"ES256\"", b, sizeof b);
    jwk_of(ed_key, "d1", "", c, sizeof c);
    jwk_of(rsa_key, "enc1", ",\"use\":\"enc\"", d, sizeof d);
    jwk_of(rsa_small, "small", "", e, sizeof e);
    snprintf(text, sizeof text,
             "{\"keys\":[%s,%s,%s,%s,%s,{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"},{\"kty\":\"EC\",\"crv\":\"P-384\"},"
             "{\"kty\":\"RSA\",\"kid\":\"noparams\"},%s]}",
             a, b, c, d, e, a);
    jwk_set_t *set = jwk_set_parse(span_of(text), notes, sizeof notes, err, sizeof err);
    CHECK(set && jwk_set_count(set) == 3);
    CHECK(strstr(notes, "enc1") && strstr(notes, "use is not") && strstr(notes, "small") && strstr(notes, "2048") &&
          strstr(notes, "kty other") && strstr(notes, "P-256") && strstr(notes, "noparams") &&
          strstr(notes, "a kid an earlier key has"));
    const jwk_t *r = jwk_set_find(set, "r1"), *ec = jwk_set_find(set, "e1"), *ed = jwk_set_find(set, "d1");
    CHECK(r && ec && ed && !jwk_set_find(set, "enc1") && !jwk_set_find(set, "nope"));
    /* one RSA key serves RS256 and PS256; an EC key with alg ES256 only that; Ed25519 only EdDSA */
    CHECK(r && jwk_fits(r, JWS_ALG_RS256) && jwk_fits(r, JWS_ALG_PS256) && !jwk_fits(r, JWS_ALG_ES256));
    CHECK(ec && jwk_fits(ec, JWS_ALG_ES256) && !jwk_fits(ec, JWS_ALG_RS256) && !jwk_fits(ec, JWS_ALG_EDDSA));
    CHECK(ed && jwk_fits(ed, JWS_ALG_EDDSA) && !jwk_fits(ed, JWS_ALG_PS256));
    jwk_set_free(set);

    /* an RSA key that names RS256 does not verify PS256 */
    jwk_of(rsa_key, "r1", ",\"alg\":\"RS256\"", a, sizeof a);
    snprintf(text, sizeof text, "{\"keys\":[%s]}", a);
    set = jwk_set_parse(span_of(text), notes, sizeof notes, err, sizeof err);
    CHECK(set && jwk_fits(jwk_set_find(set, "r1"), JWS_ALG_RS256) && !jwk_fits(jwk_set_find(set, "r1"), JWS_ALG_PS256));
    jwk_set_free(set);
    /* a point off the curve, an alg that does not fit the kty */
    snprintf(text, sizeof text, "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"},%s]}",
             "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", c);
    text[strlen(text) - 3] = '\0'; /* drop "}]}" of the Ed25519 key to add an alg */
    strcat(text, ",\"alg\":\"RS256\"}]}");
    CHECK(jwk_set_parse(span_of(text), notes, sizeof notes, err, sizeof err) == NULL && strstr(err, "no usable key"));
    CHECK(strstr(notes, "curve") && strstr(notes, "does not fit"));
    /* not a set */
    CHECK(jwk_set_parse(SPAN_LIT("[]"), notes, sizeof notes, err, sizeof err) == NULL && strstr(err, "keys"));
    CHECK(jwk_set_parse(SPAN_LIT("{\"keys\":"), notes, sizeof notes, err, sizeof err) == NULL && strstr(err, "JSON"));
    CHECK(jwk_set_parse(SPAN_LIT("{\"keys\":[]}"), notes, sizeof notes, err, sizeof err) == NULL);
}

static jwk_set_t *the_set(void)
{
    static char text[8192], a[2048], b[2048], c[2048];
    char notes[256], err[256];
    jwk_of(rsa_key, "r1", "", a, sizeof a);
    jwk_of(ec_key, "e1", "", b, sizeof b);
    jwk_of(ed_key, "d1", "", c, sizeof c);
    snprintf(text, sizeof text, "{\"keys\":[%s,%s,%s]}", a, b, c);
    return jwk_set_parse(span_of(text), notes, sizeof notes, err, sizeof err);
}

static int verify(const jwt_verifier_t *v, const char *token, jwt_claims_t *c, const char **why)
{
    return jwt_verify_with(span_of(token), v, NOW, c, why);
}

static void test_algorithms(void)
{
    jwk_set_t *set = the_set();
    const jwk_set_t *sets[] = {set};
    span_t secret = SPAN_LIT("0123456789abcdef0123456789ABCDEF!");
    jwt_verifier_t v = {.secrets = &secret,
                        .nsecrets = 1,
                        .sets = sets,
                        .nsets = 1,
                        .issuer = "https://idp.example",
                        .audience = "tally"};
    static char tok[TOKEN_MAX];
    jwt_claims_t c;
    const char *why;
    const char *claims = "{\"sub\":\"alice\",\"iss\":\"https://idp.example\",\"aud\":[\"x\",\"tally\"],\"exp\":"
                         "1900000000,\"role\":\"admin\"}";
    const struct {
        EVP_PKEY *key;
        const char *alg, *header;
    } good[] = {
        {rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"r1\"}"},
        {rsa_key, "PS256", "{\"alg\":\"PS256\",\"kid\":\"r1\"}"},
        {ec_key, "ES256", "{\"alg\":\"ES256\",\"kid\":\"e1\"}"},
        {ed_key, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"d1\"}"},
        {ec_key, "ES256", "{\"alg\":\"ES256\"}"}, /* no kid: the keys that fit are tried */
        {rsa_key, "PS256", "{\"alg\":\"PS256\",\"typ\":\"JWT\"}"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sign_token(good[i].key, good[i].alg, good[i].header, claims, tok);
        CHECK(verify(&v, tok, &c, &why) == 0 && strcmp(c.sub, "alice") == 0 && c.admin);
        tok[strlen(tok) - 5] ^= 1; /* a changed signature */
        CHECK(verify(&v, tok, &c, &why) == -1);
    }
    /* the alg must fit the key its kid names; an unknown kid asks for a fetch */
    sign_token(ec_key, "ES256", "{\"alg\":\"ES256\",\"kid\":\"r1\"}", claims, tok);
    CHECK(verify(&v, tok, &c, &why) == -1 && strstr(why, "does not fit"));
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"d1\"}", claims, tok);
    CHECK(verify(&v, tok, &c, &why) == -1);
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"new\"}", claims, tok);
    CHECK(verify(&v, tok, &c, &why) == JWT_UNKNOWN_KID && strstr(why, "kid"));
    /* crit, whatever it lists, is refused */
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"r1\",\"crit\":[\"exp\"],\"exp\":1}", claims, tok);
    CHECK(verify(&v, tok, &c, &why) == -1 && strstr(why, "crit"));
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"r1\",\"crit\":[]}", claims, tok);
    CHECK(verify(&v, tok, &c, &why) == -1 && strstr(why, "crit"));
    /* other algorithms */
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS384\",\"kid\":\"r1\"}", claims, tok);
    CHECK(verify(&v, tok, &c, &why) == -1 && strstr(why, "alg"));
    /* HS256 with the RSA key's public DER as the secret: only the configured secrets verify HS256 */
    unsigned char *der = NULL;
    int derlen = i2d_PUBKEY(rsa_key, &der);
    span_t der_secret = {(const char *)der, (size_t)derlen};
    char hs[TOKEN_MAX];
    CHECK(jwt_sign("alice", true, 1900000000, der_secret, hs, sizeof hs) > 0);
    CHECK(verify(&v, hs, &c, &why) == -1);
    jwt_verifier_t no_secret = v;
    no_secret.nsecrets = 0;
    CHECK(verify(&no_secret, hs, &c, &why) == -1 && strstr(why, "HS256"));
    OPENSSL_free(der);
    /* HS256 still works with the secret, with the claim rules */
    CHECK(jwt_sign("bob", false, 1900000000, secret, hs, sizeof hs) > 0);
    CHECK(verify(&v, hs, &c, &why) == -1 && strstr(why, "iss")); /* jwt_sign puts no iss */
    jwt_verifier_t plain = {.secrets = &secret, .nsecrets = 1, .sets = sets, .nsets = 1};
    CHECK(verify(&plain, hs, &c, &why) == 0 && strcmp(c.sub, "bob") == 0 && !c.admin);
    /* an asymmetric token without key sets */
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"r1\"}", claims, tok);
    plain.nsets = 0;
    CHECK(verify(&plain, tok, &c, &why) == -1);
    jwk_set_free(set);
}

static void test_claims(void)
{
    jwk_set_t *set = the_set();
    const jwk_set_t *sets[] = {set};
    jwt_verifier_t v = {.sets = sets, .nsets = 1, .issuer = "iss-1", .audience = "aud-1"};
    static char tok[TOKEN_MAX];
    jwt_claims_t c;
    const char *why;
    const char *header = "{\"alg\":\"EdDSA\",\"kid\":\"d1\"}";
    const struct {
        const char *claims, *why; /* why NULL: accepted */
    } cases[] = {
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":1900000000}", NULL},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":[\"a\",\"aud-1\"],\"exp\":1900000000,\"nbf\":1800000000}", NULL},
        {"{\"sub\":\"u\",\"iss\":\"iss-2\",\"aud\":\"aud-1\",\"exp\":1900000000}", "iss"},
        {"{\"sub\":\"u\",\"aud\":\"aud-1\",\"exp\":1900000000}", "iss"},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":\"aud-2\",\"exp\":1900000000}", "aud"},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":[\"aud-2\",1],\"exp\":1900000000}", "aud"},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"exp\":1900000000}", "aud"},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":1800000000}", "expired"},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":1900000000,\"nbf\":1800000001}", "nbf"},
        {"{\"sub\":\"u\",\"iss\":\"iss-1\",\"aud\":\"aud-1\"}", "exp"},
        {"{\"sub\":\"a b\",\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":1900000000}", "not a valid user id"},
        {"{\"sub\":7,\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":1900000000}", "not a valid user id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sign_token(ed_key, "EdDSA", header, cases[i].claims, tok);
        int rc = verify(&v, tok, &c, &why);
        CHECK(cases[i].why ? rc == -1 && strstr(why, cases[i].why) : rc == 0);
        if (cases[i].why ? !(rc == -1 && strstr(why, cases[i].why)) : rc != 0)
            fprintf(stderr, "  case %zu: rc %d why %s\n", i, rc, why);
    }
    /* another user claim, and the admin claim as a nested path holding an array */
    v.user_claim = "preferred_username";
    v.admin_claim = "realm_access.roles";
    v.admin_value = "admin";
    sign_token(ed_key, "EdDSA", header,
               "{\"sub\":\"f:1\",\"preferred_username\":\"carol\",\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":"
               "1900000000,\"realm_access\":{\"roles\":[\"user\",\"admin\"]}}",
               tok);
    CHECK(verify(&v, tok, &c, &why) == 0 && strcmp(c.sub, "carol") == 0 && c.admin);
    sign_token(ed_key, "EdDSA", header,
               "{\"preferred_username\":\"dave\",\"iss\":\"iss-1\",\"aud\":\"aud-1\",\"exp\":1900000000,"
               "\"realm_access\":{\"roles\":[\"user\"]},\"role\":\"admin\"}",
               tok);
    CHECK(verify(&v, tok, &c, &why) == 0 && strcmp(c.sub, "dave") == 0 && !c.admin);
    jwk_set_free(set);

    /* jwt_claim_find: a literal member first (namespaced claims keep their dots), then the path */
    json_t *doc = json_loads("{\"a\":{\"b\":{\"c\":\"x\"}},\"https://ex.com/roles\":[\"admin\"],\"r\":\"admin\","
                             "\"a.b\":\"literal\",\"n\":{\"roles\":\"admin\"},\"s\":\"admins\",\"arr\":[1,\"x\"]}",
                             0, NULL);
    CHECK(json_is_string(jwt_claim_find(doc, "a.b.c")) &&
          strcmp(json_string_value(jwt_claim_find(doc, "a.b.c")), "x") == 0);
    CHECK(strcmp(json_string_value(jwt_claim_find(doc, "a.b")), "literal") == 0);
    CHECK(jwt_claim_find(doc, "a.x.c") == NULL && jwt_claim_find(doc, "r.x") == NULL &&
          jwt_claim_find(doc, "a..b") == NULL && jwt_claim_find(doc, "nope") == NULL);
    CHECK(jwt_claim_holds(doc, "https://ex.com/roles", "admin"));
    CHECK(jwt_claim_holds(doc, "r", "admin") && jwt_claim_holds(doc, "n.roles", "admin"));
    CHECK(!jwt_claim_holds(doc, "s", "admin") && !jwt_claim_holds(doc, "a", "admin"));
    CHECK(jwt_claim_holds(doc, "arr", "x") && !jwt_claim_holds(doc, "arr", "1"));
    json_decref(doc);
}

static void test_secret_strength(void)
{
    char forty[41];
    memset(forty, ' ', 40);
    forty[40] = '\0';
    CHECK(jwt_secret_weakness(span_of(forty)) != NULL);
    memset(forty, 'A', 40);
    CHECK(jwt_secret_weakness(span_of(forty)) != NULL && strstr(jwt_secret_weakness(span_of(forty)), "repeated"));
    CHECK(jwt_secret_weakness(SPAN_LIT(" \t \t \t \t \t \t \t \t \t \t \t \t \t \t \t \t \t")) != NULL);
    CHECK(strstr(jwt_secret_weakness(SPAN_LIT("short")), "32"));
    CHECK(jwt_secret_weakness(SPAN_LIT("0123456789abcdef0123456789abcdef")) == NULL);
    CHECK(jwt_secret_weakness(SPAN_LIT("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB")) == NULL);
    span_t s[JWT_SECRETS_MAX];
    char err[256];
    memset(forty, 'A', 40);
    CHECK(jwt_secrets_parse(span_of(forty), s, err, sizeof err) == -1 && strstr(err, "line 1"));
    memset(forty, ' ', 40);
    CHECK(jwt_secrets_parse(span_of(forty), s, err, sizeof err) == -1);
}

/* --- the key state and its reload --- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

typedef struct {
    auth_keys_t *keys;
    const char *token;
    atomic_bool stop;
    atomic_int bad; /* verifications that failed while the token's key stayed in every set */
    atomic_int done;
} verifier_arg_t;

static void *verifier(void *arg)
{
    verifier_arg_t *a = arg;
    while (!atomic_load(&a->stop)) {
        jwt_claims_t c;
        const char *why;
        if (auth_keys_verify(a->keys, span_of(a->token), NOW, &c, &why) != 0)
            atomic_fetch_add(&a->bad, 1);
        atomic_fetch_add(&a->done, 1);
    }
    return NULL;
}

static void test_reload(void)
{
    char dir[] = "/tmp/tally-unit-idp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char keys_path[64], secret_path[64];
    snprintf(keys_path, sizeof keys_path, "%s/jwks.json", dir);
    snprintf(secret_path, sizeof secret_path, "%s/secret", dir);
    static char text[8192], a[2048], b[2048], tok[TOKEN_MAX], tok2[TOKEN_MAX], hs[TOKEN_MAX];
    jwk_of(rsa_key, "r1", "", a, sizeof a);
    jwk_of(ec_key, "e1", "", b, sizeof b);
    snprintf(text, sizeof text, "{\"keys\":[%s]}", a);
    write_file(keys_path, text);
    write_file(secret_path, "first-secret-of-at-least-32-bytes!!\n");
    const char *claims = "{\"sub\":\"u1\",\"iss\":\"I\",\"aud\":\"A\",\"exp\":1900000000}";
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"r1\"}", claims, tok);
    sign_token(ec_key, "ES256", "{\"alg\":\"ES256\",\"kid\":\"e1\"}", claims, tok2);

    static auth_keys_t keys = {.lock = PTHREAD_RWLOCK_INITIALIZER};
    auth_config_t cfg = {.secret_file = secret_path, .keys_file = keys_path, .issuer = "I", .audience = "A"};
    const char *flag = NULL;
    char err[1024];
    jwt_claims_t c;
    const char *why;
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    CHECK(auth_keys_ready(&keys) && keys.count == 1);
    CHECK(auth_keys_verify(&keys, span_of(tok), NOW, &c, &why) == 0 && strcmp(c.sub, "u1") == 0);
    CHECK(auth_keys_verify(&keys, span_of(tok2), NOW, &c, &why) == JWT_UNKNOWN_KID);

    /* threads verify while the key file is rewritten and reloaded, good and bad */
    verifier_arg_t va = {.keys = &keys, .token = tok};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, verifier, &va);
    snprintf(text, sizeof text, "{\"keys\":[%s,%s]}", a, b);
    for (int round = 0; round < 40; round++) {
        write_file(keys_path, round % 2 ? text : "{\"keys\":[{\"kty\":\"oct\"}]}");
        int rc = auth_keys_reload(&keys, &cfg, &flag, err, sizeof err);
        CHECK(round % 2 ? rc == 0 : rc == -1 && strcmp(flag, "--jwt-keys") == 0 && strstr(err, "no usable key"));
    }
    for (int i = 0; i < 200 && atomic_load(&va.done) < 100; i++)
        usleep(1000);
    atomic_store(&va.stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&va.bad) == 0 && atomic_load(&va.done) > 0);
    CHECK(auth_keys_verify(&keys, span_of(tok2), NOW, &c, &why) == 0); /* the last good file has e1 */

    /* a weak secret, missing issuer, a bad admin claim: refused, the keys in force kept */
    write_file(secret_path, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n");
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == -1 && strcmp(flag, "--jwt-secret-file") == 0 &&
          strstr(err, "repeated"));
    CHECK(jwt_sign("u2", false, 1900000000, SPAN_LIT("first-secret-of-at-least-32-bytes!!"), hs, sizeof hs) > 0);
    jwt_verifier_t plain = {.secrets = keys.secrets, .nsecrets = (size_t)keys.count};
    CHECK(jwt_verify_with(span_of(hs), &plain, NOW, &c, &why) == 0); /* the old secret is still in force */
    auth_config_t bad = cfg;
    bad.issuer = NULL;
    CHECK(auth_keys_reload(&keys, &bad, &flag, err, sizeof err) == -1 && strcmp(flag, "--jwt-issuer") == 0);
    bad = cfg;
    bad.admin_claim = "role";
    CHECK(auth_keys_reload(&keys, &bad, &flag, err, sizeof err) == -1 && strcmp(flag, "--jwt-admin-claim") == 0);
    bad = (auth_config_t){0};
    CHECK(auth_keys_reload(&keys, &bad, &flag, err, sizeof err) == -1); /* not a switch to development mode */
    bad = cfg;
    bad.jwks_url = "http://idp.example/jwks";
    CHECK(auth_keys_reload(&keys, &bad, &flag, err, sizeof err) == -1 && strcmp(flag, "--jwt-jwks-url") == 0);
    CHECK(auth_keys_verify(&keys, span_of(tok), NOW, &c, &why) == 0);
    /* a new audience takes effect */
    write_file(secret_path, "first-secret-of-at-least-32-bytes!!\n");
    cfg.audience = "B";
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    CHECK(auth_keys_verify(&keys, span_of(tok), NOW, &c, &why) == -1 && strstr(why, "aud"));
    /* a URL that cannot answer: not ready, and tokens get AUTH_KEYS_NOT_LOADED, until a set loads */
    cfg.audience = "A";
    cfg.jwks_url = "http://127.0.0.1:9/jwks"; /* the discard port: nothing listens on loopback */
    cfg.jwks_refresh_ms = 60000;
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    CHECK(!auth_keys_ready(&keys));
    CHECK(auth_keys_verify(&keys, span_of(tok), NOW, &c, &why) == AUTH_KEYS_NOT_LOADED);
    cfg.jwks_url = NULL; /* removed: ready again with the file's keys */
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    CHECK(auth_keys_ready(&keys) && auth_keys_verify(&keys, span_of(tok), NOW, &c, &why) == 0);
    auth_keys_stop(&keys);
    unlink(keys_path);
    unlink(secret_path);
    rmdir(dir);
}

/* A JWKS endpoint on 127.0.0.1: answers every request with body (HTTP/1.0, then closes). */
typedef struct {
    int fd;
    uint16_t port;
    const char *body;
    atomic_int served;
    pthread_t thread;
} jwks_server_t;

static void *jwks_serve(void *arg)
{
    jwks_server_t *s = arg;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* closed: the test is over */
        char buf[2048], head[128];
        ssize_t got = recv(c, buf, sizeof buf, 0);
        (void)got;
        int n = snprintf(head, sizeof head, "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n", strlen(s->body));
        if (send(c, head, (size_t)n, MSG_NOSIGNAL) == n)
            send(c, s->body, strlen(s->body), MSG_NOSIGNAL);
        atomic_fetch_add(&s->served, 1);
        close(c);
    }
}

static void jwks_server_start(jwks_server_t *s, const char *body)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    s->body = body;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(bind(s->fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s->fd, 8) == 0);
    getsockname(s->fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->thread, NULL, jwks_serve, s);
}

static void jwks_server_stop(jwks_server_t *s)
{
    shutdown(s->fd, SHUT_RDWR); /* wakes accept */
    close(s->fd);
    pthread_join(s->thread, NULL);
}

/* Waits (at most 10 s) until token verifies with keys. */
static bool verifies_soon(auth_keys_t *keys, const char *token)
{
    jwt_claims_t c;
    const char *why;
    for (int i = 0; i < 1000; i++) {
        if (auth_keys_verify(keys, span_of(token), NOW, &c, &why) == 0)
            return true;
        usleep(10000);
    }
    return false;
}

/* The reload entry point with a JWKS URL: a first set loads in the background, a changed URL is
 * fetched at once (the old set serving until then), and an unknown kid is refused at once. */
static void test_reload_url(void)
{
    static char one[4096], two[4096], a[2048], b[2048], tok_r[TOKEN_MAX], tok_e[TOKEN_MAX];
    jwk_of(rsa_key, "r1", "", a, sizeof a);
    jwk_of(ec_key, "e1", "", b, sizeof b);
    snprintf(one, sizeof one, "{\"keys\":[%s]}", a);
    snprintf(two, sizeof two, "{\"keys\":[%s]}", b);
    const char *claims = "{\"sub\":\"u1\",\"iss\":\"I\",\"aud\":\"A\",\"exp\":1900000000}";
    sign_token(rsa_key, "RS256", "{\"alg\":\"RS256\",\"kid\":\"r1\"}", claims, tok_r);
    sign_token(ec_key, "ES256", "{\"alg\":\"ES256\",\"kid\":\"e1\"}", claims, tok_e);
    jwks_server_t s1 = {0}, s2 = {0};
    jwks_server_start(&s1, one);
    jwks_server_start(&s2, two);
    char url1[64], url2[64], err[512];
    snprintf(url1, sizeof url1, "http://127.0.0.1:%u/certs", s1.port);
    snprintf(url2, sizeof url2, "http://localhost:%u/certs", s2.port);

    static auth_keys_t keys = {.lock = PTHREAD_RWLOCK_INITIALIZER};
    auth_config_t cfg = {.jwks_url = url1, .jwks_refresh_ms = 600000, .issuer = "I", .audience = "A"};
    const char *flag = NULL;
    jwt_claims_t c;
    const char *why;
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    CHECK(verifies_soon(&keys, tok_r) && auth_keys_ready(&keys));
    CHECK(auth_keys_fetches(&keys) == 1 && atomic_load(&s1.served) == 1);
    /* an unknown kid: refused now; the fetch it asks for waits for 30 s after the last */
    CHECK(auth_keys_verify(&keys, span_of(tok_e), NOW, &c, &why) == JWT_UNKNOWN_KID);
    usleep(200000);
    CHECK(auth_keys_fetches(&keys) == 1);
    /* the URL changes: fetched at once; the old set serves until the new one is in */
    cfg.jwks_url = url2;
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    CHECK(verifies_soon(&keys, tok_e));
    CHECK(auth_keys_verify(&keys, span_of(tok_r), NOW, &c, &why) == JWT_UNKNOWN_KID); /* the new set only */
    CHECK(atomic_load(&s2.served) >= 1);
    /* a shorter refresh applies from the reload: fetched again within it */
    int before = atomic_load(&s2.served);
    cfg.jwks_refresh_ms = 1000;
    CHECK(auth_keys_reload(&keys, &cfg, &flag, err, sizeof err) == 0);
    for (int i = 0; i < 500 && atomic_load(&s2.served) == before; i++)
        usleep(10000);
    CHECK(atomic_load(&s2.served) > before);
    auth_keys_stop(&keys);
    jwks_server_stop(&s1);
    jwks_server_stop(&s2);
}

static void test_jwks_url(void)
{
    char why[256];
    CHECK(jwks_url_check("https://idp.example/.well-known/jwks.json", why, sizeof why) == 0);
    CHECK(jwks_url_check("http://127.0.0.1:8080/jwks", why, sizeof why) == 0);
    CHECK(jwks_url_check("http://[::1]:8080/jwks", why, sizeof why) == 0);
    CHECK(jwks_url_check("http://localhost/jwks", why, sizeof why) == 0);
    CHECK(jwks_url_check("http://10.0.0.1/jwks", why, sizeof why) == -1 && strstr(why, "https"));
    CHECK(jwks_url_check("http://idp.example/jwks", why, sizeof why) == -1);
    CHECK(jwks_url_check("ftp://idp.example/jwks", why, sizeof why) == -1);
    CHECK(jwks_url_check("https://", why, sizeof why) == -1);
}

void test_idp(void)
{
    keys_make();
    test_es256_der();
    test_jwk_parse();
    test_algorithms();
    test_claims();
    test_secret_strength();
    test_reload();
    test_reload_url();
    test_jwks_url();
    EVP_PKEY_free(rsa_key);
    EVP_PKEY_free(rsa_small);
    EVP_PKEY_free(ec_key);
    EVP_PKEY_free(ed_key);
}
