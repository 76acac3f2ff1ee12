/* jwk.c — JWK Set parsing into OpenSSL public keys, and JWS signature checks with them. */
#include "core/jwk.h"

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/b64url.h"

#define P256_COORD_LEN 32
#define ED25519_KEY_LEN 32
#define RSA_PARAM_MAX 1024 /* bytes of n (8192 bits) */
#define JWK_ALG_MAX 16

struct jwk {
    jwk_type_t type;
    jws_alg_t alg; /* JWS_ALG_OTHER: the JWK names none */
    char kid[JWK_KID_MAX + 1];
    EVP_PKEY *pkey;
};

struct jwk_set {
    size_t n;
    jwk_t keys[JWK_KEYS_MAX];
};

jws_alg_t jws_alg_of(const char *alg)
{
    static const char *const names[] = {
        [JWS_ALG_RS256] = "RS256", [JWS_ALG_PS256] = "PS256", [JWS_ALG_ES256] = "ES256", [JWS_ALG_EDDSA] = "EdDSA"};
    for (int i = 0; alg && i < JWS_ALG_OTHER; i++)
        if (strcmp(alg, names[i]) == 0)
            return (jws_alg_t)i;
    return JWS_ALG_OTHER;
}

static void note(char *notes, size_t noteslen, size_t index, const char *kid, const char *fmt, ...)
{
    if (!notes || noteslen == 0)
        return;
    size_t used = strnlen(notes, noteslen);
    if (used + 1 >= noteslen)
        return;
    int n = snprintf(notes + used, noteslen - used, "key %zu%s%s%s: ", index + 1, kid && *kid ? " (kid " : "",
                     kid && *kid ? kid : "", kid && *kid ? ")" : "");
    if (n < 0 || used + (size_t)n + 1 >= noteslen)
        return;
    used += (size_t)n;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(notes + used, noteslen - used, fmt, ap);
    va_end(ap);
    if (n >= 0 && used + (size_t)n + 2 < noteslen)
        strcat(notes, "; ");
}

/* A base64url member of a JWK, decoded into out. Returns the length, or -1 (missing or malformed). */
static int b64_member(const json_t *jwk, const char *name, unsigned char *out, size_t cap)
{
    const json_t *v = json_object_get(jwk, name);
    if (!json_is_string(v))
        return -1;
    return b64url_decode((span_t){json_string_value(v), json_string_length(v)}, out, cap);
}

static EVP_PKEY *from_params(const char *type, OSSL_PARAM_BLD *bld)
{
    OSSL_PARAM *params = bld ? OSSL_PARAM_BLD_to_param(bld) : NULL;
    EVP_PKEY_CTX *ctx = params ? EVP_PKEY_CTX_new_from_name(NULL, type, NULL) : NULL;
    EVP_PKEY *pkey = NULL;
    if (ctx && EVP_PKEY_fromdata_init(ctx) > 0 && EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) <= 0)
        pkey = NULL;
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return pkey;
}

static const char *rsa_key(const json_t *jwk, EVP_PKEY **out)
{
    unsigned char n[RSA_PARAM_MAX + 3], e[16];
    int nlen = b64_member(jwk, "n", n, sizeof n), elen = b64_member(jwk, "e", e, sizeof e);
    if (nlen <= 0 || elen <= 0)
        return "an RSA key needs n and e (base64url, n at most 8192 bits)";
    BIGNUM *bn_n = BN_bin2bn(n, nlen, NULL), *bn_e = BN_bin2bn(e, elen, NULL);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    const char *why = NULL;
    if (!bn_n || !bn_e || !bld)
        why = "out of memory";
    else if (BN_num_bits(bn_n) < JWK_RSA_MIN_BITS)
        why = "an RSA modulus under 2048 bits";
    else if (!BN_is_odd(bn_e) || BN_is_one(bn_e))
        why = "an RSA exponent that is not odd and above 1";
    else if (!OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) ||
             !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e) || !(*out = from_params("RSA", bld)))
        why = "OpenSSL refused the RSA key";
    OSSL_PARAM_BLD_free(bld);
    BN_free(bn_n);
    BN_free(bn_e);
    return why;
}

static const char *ec_key(const json_t *jwk, EVP_PKEY **out)
{
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    unsigned char point[1 + 2 * P256_COORD_LEN], x[P256_COORD_LEN + 3], y[P256_COORD_LEN + 3];
    if (!crv || strcmp(crv, "P-256") != 0)
        return "an EC key on a curve other than P-256";
    if (b64_member(jwk, "x", x, sizeof x) != P256_COORD_LEN || b64_member(jwk, "y", y, sizeof y) != P256_COORD_LEN)
        return "an EC key needs x and y of 32 bytes each";
    point[0] = 0x04; /* uncompressed: x then y */
    memcpy(point + 1, x, P256_COORD_LEN);
    memcpy(point + 1 + P256_COORD_LEN, y, P256_COORD_LEN);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    const char *why = NULL;
    if (!bld || !OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
        !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point) ||
        !(*out = from_params("EC", bld)))
        why = "OpenSSL refused the EC key (is the point on the curve?)";
    OSSL_PARAM_BLD_free(bld);
    return why;
}

static const char *okp_key(const json_t *jwk, EVP_PKEY **out)
{
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    unsigned char x[ED25519_KEY_LEN + 3];
    if (!crv || strcmp(crv, "Ed25519") != 0)
        return "an OKP key on a curve other than Ed25519";
    if (b64_member(jwk, "x", x, sizeof x) != ED25519_KEY_LEN)
        return "an Ed25519 key needs x of 32 bytes";
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    const char *why = NULL;
    if (!bld || !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, x, ED25519_KEY_LEN) ||
        !(*out = from_params("ED25519", bld)))
        why = "OpenSSL refused the Ed25519 key";
    OSSL_PARAM_BLD_free(bld);
    return why;
}

/* One JWK into key. Returns NULL, or why it is skipped. */
static const char *parse_key(const json_t *jwk, jwk_t *key)
{
    if (!json_is_object(jwk))
        return "not a JSON object";
    const json_t *use = json_object_get(jwk, "use"), *kid = json_object_get(jwk, "kid");
    const json_t *alg = json_object_get(jwk, "alg"), *kty = json_object_get(jwk, "kty");
    if (use && (!json_is_string(use) || strcmp(json_string_value(use), "sig") != 0))
        return "use is not \"sig\"";
    if (kid && (!json_is_string(kid) || json_string_length(kid) > JWK_KID_MAX ||
                strlen(json_string_value(kid)) != json_string_length(kid)))
        return "kid is not a string of at most 256 bytes";
    if (!json_is_string(kty))
        return "no kty";
    const char *k = json_string_value(kty);
    *key = (jwk_t){.alg = JWS_ALG_OTHER};
    if (alg) {
        key->alg = jws_alg_of(json_string_value(alg));
        if (key->alg == JWS_ALG_OTHER)
            return "an alg other than RS256, PS256, ES256 or EdDSA";
    }
    const char *why;
    if (strcmp(k, "RSA") == 0) {
        key->type = JWK_RSA;
        why = rsa_key(jwk, &key->pkey);
    } else if (strcmp(k, "EC") == 0) {
        key->type = JWK_EC_P256;
        why = ec_key(jwk, &key->pkey);
    } else if (strcmp(k, "OKP") == 0) {
        key->type = JWK_ED25519;
        why = okp_key(jwk, &key->pkey);
    } else
        return "a kty other than RSA, EC or OKP";
    if (!why && key->alg != JWS_ALG_OTHER && !jwk_fits(key, key->alg))
        why = "an alg that does not fit its kty";
    if (why) {
        EVP_PKEY_free(key->pkey);
        key->pkey = NULL;
        return why;
    }
    if (kid)
        snprintf(key->kid, sizeof key->kid, "%s", json_string_value(kid));
    return NULL;
}

jwk_set_t *jwk_set_parse(span_t text, char *notes, size_t noteslen, char *err, size_t errlen)
{
    if (notes && noteslen)
        notes[0] = '\0';
    if (text.len > JWK_SET_MAX_BYTES) {
        snprintf(err, errlen, "the JWK Set is larger than 1 MiB");
        return NULL;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(text.ptr, text.len, JSON_REJECT_DUPLICATES, &jerr);
    const json_t *keys = json_object_get(doc, "keys");
    if (!doc || !json_is_array(keys)) {
        snprintf(err, errlen, "%s", doc ? "not a JWK Set: no \"keys\" array" : "not JSON");
        json_decref(doc);
        return NULL;
    }
    jwk_set_t *set = calloc(1, sizeof *set);
    if (!set) {
        snprintf(err, errlen, "out of memory");
        json_decref(doc);
        return NULL;
    }
    size_t i;
    const json_t *jwk;
    json_array_foreach(keys, i, jwk)
    {
        const char *kid = json_string_value(json_object_get(jwk, "kid"));
        if (set->n == JWK_KEYS_MAX) {
            note(notes, noteslen, i, kid, "more than %d keys", JWK_KEYS_MAX);
            continue;
        }
        const char *why = parse_key(jwk, &set->keys[set->n]);
        if (!why && set->keys[set->n].kid[0] && jwk_set_find(set, set->keys[set->n].kid)) {
            EVP_PKEY_free(set->keys[set->n].pkey);
            why = "a kid an earlier key has";
        }
        if (why)
            note(notes, noteslen, i, kid && strlen(kid) <= 64 ? kid : NULL, "%s", why);
        else
            set->n++;
    }
    json_decref(doc);
    if (set->n == 0) {
        snprintf(err, errlen, "no usable key in the JWK Set (RSA, EC P-256 or OKP Ed25519, use \"sig\")");
        jwk_set_free(set);
        return NULL;
    }
    return set;
}

void jwk_set_free(jwk_set_t *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++)
        EVP_PKEY_free(set->keys[i].pkey);
    free(set);
}

size_t jwk_set_count(const jwk_set_t *set)
{
    return set ? set->n : 0;
}

const jwk_t *jwk_set_key(const jwk_set_t *set, size_t i)
{
    return set && i < set->n ? &set->keys[i] : NULL;
}

const jwk_t *jwk_set_find(const jwk_set_t *set, const char *kid)
{
    for (size_t i = 0; set && kid && i < set->n; i++)
        if (set->keys[i].kid[0] && strcmp(set->keys[i].kid, kid) == 0)
            return &set->keys[i];
    return NULL;
}

jwk_type_t jwk_type(const jwk_t *key)
{
    return key->type;
}

const char *jwk_kid(const jwk_t *key)
{
    return key->kid;
}

bool jwk_fits(const jwk_t *key, jws_alg_t alg)
{
    if (key->alg != JWS_ALG_OTHER && key->alg != alg)
        return false;
    switch (alg) {
    case JWS_ALG_RS256:
    case JWS_ALG_PS256:
        return key->type == JWK_RSA;
    case JWS_ALG_ES256:
        return key->type == JWK_EC_P256;
    case JWS_ALG_EDDSA:
        return key->type == JWK_ED25519;
    default:
        return false;
    }
}

int jwk_es256_sig_to_der(const unsigned char rs[JWK_ES256_SIG_LEN], unsigned char *der, size_t cap)
{
    ECDSA_SIG *sig = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(rs, JWK_ES256_SIG_LEN / 2, NULL);
    BIGNUM *s = BN_bin2bn(rs + JWK_ES256_SIG_LEN / 2, JWK_ES256_SIG_LEN / 2, NULL);
    int len = -1;
    if (sig && r && s && ECDSA_SIG_set0(sig, r, s)) {
        r = s = NULL; /* owned by sig now */
        int need = i2d_ECDSA_SIG(sig, NULL);
        unsigned char *p = der;
        if (need > 0 && (size_t)need <= cap)
            len = i2d_ECDSA_SIG(sig, &p);
    }
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return len;
}

bool jwk_verify(const jwk_t *key, jws_alg_t alg, span_t data, const unsigned char *sig, size_t siglen)
{
    if (!jwk_fits(key, alg))
        return false;
    unsigned char der[JWK_ES256_DER_MAX];
    if (alg == JWS_ALG_ES256) {
        int n = siglen == JWK_ES256_SIG_LEN ? jwk_es256_sig_to_der(sig, der, sizeof der) : -1;
        if (n < 0)
            return false;
        sig = der;
        siglen = (size_t)n;
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    bool ok = false;
    if (!md || EVP_DigestVerifyInit(md, &pctx, alg == JWS_ALG_EDDSA ? NULL : EVP_sha256(), NULL, key->pkey) <= 0)
        goto done;
    if (alg == JWS_ALG_PS256 && (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) <= 0 ||
                                 EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) <= 0 ||
                                 EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) <= 0))
        goto done;
    if (alg == JWS_ALG_RS256 && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0)
        goto done;
    ok = EVP_DigestVerify(md, sig, siglen, (const unsigned char *)data.ptr, data.len) == 1;
done:
    EVP_MD_CTX_free(md);
    return ok;
}
