/* authkeys.h — the keys and claim rules tokens are verified with, shared by every HTTP thread and
 * replaced as a whole on reload: the HS256 secrets (TALLY_JWT_SECRET or --jwt-secret-file), the key
 * file (--jwt-keys), the identity provider's set (--jwt-jwks-url, kept fresh by engine/jwks.h), and
 * the issuer, audience, user and admin claims. A reload parses everything first and swaps under the
 * write lock only when all of it is good; verifications hold the read lock. */
#ifndef TALLY_ENGINE_AUTHKEYS_H
#define TALLY_ENGINE_AUTHKEYS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/jwk.h"
#include "core/jwt.h"
#include "core/span.h"
#include "engine/jwks.h"

#define AUTH_KEYS_NOT_LOADED (-3) /* auth_keys_verify: no set fetched yet from the JWKS URL */
#define AUTH_KEY_FILE_MAX (1u << 20)
#define AUTH_JWKS_REFRESH_DEFAULT "10m"

/* Where the keys come from and what tokens must claim: the flags (and the environment's secret). */
typedef struct {
    const char *secret_file;  /* --jwt-secret-file: HS256 secrets, one per line */
    const char *secret;       /* TALLY_JWT_SECRET (when no file) */
    const char *keys_file;    /* --jwt-keys: a JWK Set */
    const char *jwks_url;     /* --jwt-jwks-url */
    uint64_t jwks_refresh_ms; /* --jwt-jwks-refresh */
    const char *issuer;       /* --jwt-issuer */
    const char *audience;     /* --jwt-audience */
    const char *user_claim;   /* --jwt-user-claim (NULL: sub) */
    const char *admin_claim;  /* --jwt-admin-claim NAME=VALUE (NULL: role=admin) */
} auth_config_t;

typedef struct auth_rules auth_rules_t; /* what auth_keys_reload parsed */

/* The keys in force. Zero it and set lock to PTHREAD_RWLOCK_INITIALIZER before the first load. */
typedef struct {
    pthread_rwlock_t lock;
    char *text; /* the secrets' bytes (file or environment) */
    span_t secrets[JWT_SECRETS_MAX];
    int count;
    auth_rules_t *rules;     /* key file and claims; NULL before auth_keys_reload */
    jwk_set_t *url_set;      /* the last good set from the URL; NULL until one is loaded */
    bool url_configured;     /* a JWKS URL is given: not ready until url_set */
    jwks_fetcher_t *fetcher; /* NULL without a URL */
} auth_keys_t;

/* True when cfg puts tallyd in token mode: a secret, a key file or a JWKS URL. */
bool auth_config_token_mode(const auth_config_t *cfg);

/* Checks cfg without reading files: --jwt-issuer and --jwt-audience with a key file or URL, the
 * URL's scheme, the admin claim's NAME=VALUE. Returns 0, or -1 with the flag to blame and why. */
int auth_config_check(const auth_config_t *cfg, const char **flag, char *why, size_t whylen);

/* Loads the HS256 secrets only: from the file when given (one per line), else from secret. A weak
 * secret (jwt_secret_weakness) is refused. Returns 0, or -1 with a message in err (the secrets in
 * force are kept). */
int auth_keys_load(auth_keys_t *keys, const char *file, const char *secret, char *err, size_t errlen);

/* The start-up load and the reload entry point (SIGHUP): checks cfg, re-reads the secrets and the
 * key file, takes the claim rules, and points the JWKS fetcher at cfg's URL (started on first use;
 * a changed URL is fetched at once, its old set kept until the new one loads; a URL removed stops
 * it). All of it is parsed before anything changes; on any error nothing changes and it returns -1
 * with the flag to blame and why. Safe while HTTP threads verify tokens. Not a switch between
 * token and development mode: a cfg without any key source is refused once keys are loaded. The
 * fetcher's thread is started here; auth_keys_stop ends it. */
int auth_keys_reload(auth_keys_t *keys, const auth_config_t *cfg, const char **flag, char *err, size_t errlen);

/* Verifies a bearer token with the keys in force. Returns 0 (claims filled), -1 (why),
 * AUTH_KEYS_NOT_LOADED (a JWKS URL is given and no set was fetched yet), or JWT_UNKNOWN_KID (the
 * fetcher has been asked to look again; the token is refused now). */
int auth_keys_verify(auth_keys_t *keys, span_t token, uint64_t now_s, jwt_claims_t *claims, const char **why);

/* False while a JWKS URL is given and no set from it was loaded yet (/readyz). */
bool auth_keys_ready(auth_keys_t *keys);

/* Fetches begun from the URL (0 without one). */
uint64_t auth_keys_fetches(auth_keys_t *keys);

/* Stops the fetcher and frees everything loaded; keys may be loaded again. */
void auth_keys_stop(auth_keys_t *keys);

#endif
