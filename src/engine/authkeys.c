/* authkeys.c — the keys tokens are verified with, and their reload. See authkeys.h. */
#include "engine/authkeys.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET_FILE_MAX (64 * 1024)
#define CLAIM_MAX 256
#define NOTES_MAX 1024

struct auth_rules {
    jwk_set_t *file_set; /* --jwt-keys; NULL without */
    char issuer[CLAIM_MAX + 1], audience[CLAIM_MAX + 1];
    bool has_issuer, has_audience;
    char user_claim[CLAIM_MAX + 1];
    char admin_claim[CLAIM_MAX + 1], admin_value[CLAIM_MAX + 1];
};

static void rules_free(auth_rules_t *r)
{
    if (r)
        jwk_set_free(r->file_set);
    free(r);
}

bool auth_config_token_mode(const auth_config_t *cfg)
{
    return cfg->secret_file || (cfg->secret && *cfg->secret) || cfg->keys_file || cfg->jwks_url;
}

/* NAME=VALUE into its two halves. Returns 0, or -1. */
static int split_admin_claim(const char *spec, char *name, char *value)
{
    const char *eq = spec ? strchr(spec, '=') : NULL;
    if (!eq || eq == spec || !eq[1] || (size_t)(eq - spec) > CLAIM_MAX || strlen(eq + 1) > CLAIM_MAX)
        return -1;
    memcpy(name, spec, (size_t)(eq - spec));
    name[eq - spec] = '\0';
    strcpy(value, eq + 1);
    return 0;
}

int auth_config_check(const auth_config_t *cfg, const char **flag, char *why, size_t whylen)
{
    char name[CLAIM_MAX + 1], value[CLAIM_MAX + 1];
    bool provider = cfg->keys_file || cfg->jwks_url;
    *flag = NULL;
    if (provider && !cfg->issuer)
        *flag = "--jwt-issuer";
    else if (provider && !cfg->audience)
        *flag = "--jwt-audience";
    if (*flag) {
        snprintf(why, whylen,
                 "is required with --jwt-keys or --jwt-jwks-url (a token the provider issued to another "
                 "application must be refused)");
        return -1;
    }
    const struct {
        const char *flag, *value;
    } lengths[] = {
        {"--jwt-issuer", cfg->issuer}, {"--jwt-audience", cfg->audience}, {"--jwt-user-claim", cfg->user_claim}};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
        if (lengths[i].value && (!*lengths[i].value || strlen(lengths[i].value) > CLAIM_MAX)) {
            *flag = lengths[i].flag;
            snprintf(why, whylen, "expected 1 to %d bytes", CLAIM_MAX);
            return -1;
        }
    if (cfg->admin_claim && split_admin_claim(cfg->admin_claim, name, value) != 0) {
        *flag = "--jwt-admin-claim";
        snprintf(why, whylen, "expected NAME=VALUE such as role=admin or realm_access.roles=admin");
        return -1;
    }
    if (cfg->jwks_url && jwks_url_check(cfg->jwks_url, why, whylen) != 0) {
        *flag = "--jwt-jwks-url";
        return -1;
    }
    return 0;
}

/* The whole of a file up to max bytes, NUL-terminated. Returns it (to free), or NULL with err. */
static char *read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s", path);
        return NULL;
    }
    char *text = malloc(max + 1);
    *len = text ? fread(text, 1, max + 1, f) : 0;
    bool failed = ferror(f);
    fclose(f);
    if (!text || *len > max || failed) {
        free(text);
        snprintf(err, errlen, failed ? "cannot read %s" : "%s is too large", path);
        return NULL;
    }
    text[*len] = '\0';
    return text;
}

/* The secrets parsed into new (text owned). Returns 0, or -1 with err. */
static int secrets_read(const char *file, const char *secret, char **text_out, span_t secrets[JWT_SECRETS_MAX],
                        int *count, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (file) {
        if (!(text = read_file(file, SECRET_FILE_MAX, &len, err, errlen)))
            return -1;
    } else {
        len = strlen(secret);
        text = malloc(len + 1);
        if (!text) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(text, secret, len + 1);
    }
    int n = jwt_secrets_parse((span_t){text, len}, secrets, err, errlen);
    if (n <= 0) {
        free(text);
        return -1;
    }
    *text_out = text;
    *count = n;
    return 0;
}

int auth_keys_load(auth_keys_t *keys, const char *file, const char *secret, char *err, size_t errlen)
{
    char *text;
    span_t secrets[JWT_SECRETS_MAX];
    int n;
    if (secrets_read(file, secret, &text, secrets, &n, err, errlen) != 0)
        return -1;
    pthread_rwlock_wrlock(&keys->lock);
    char *old = keys->text;
    keys->text = text;
    memcpy(keys->secrets, secrets, sizeof secrets);
    keys->count = n;
    pthread_rwlock_unlock(&keys->lock);
    free(old);
    return 0;
}

/* The fetcher's delivery: the new set replaces the last. */
static void on_url_set(void *arg, jwk_set_t *set)
{
    auth_keys_t *keys = arg;
    pthread_rwlock_wrlock(&keys->lock);
    jwk_set_t *old = keys->url_set;
    keys->url_set = set;
    pthread_rwlock_unlock(&keys->lock);
    jwk_set_free(old);
}

int auth_keys_reload(auth_keys_t *keys, const auth_config_t *cfg, const char **flag, char *err, size_t errlen)
{
    if (auth_config_check(cfg, flag, err, errlen) != 0)
        return -1;
    if (!auth_config_token_mode(cfg)) {
        *flag = "--jwt-secret-file";
        snprintf(err, errlen, "no secret, --jwt-keys or --jwt-jwks-url: development mode is not a reload away");
        return -1;
    }
    char *text = NULL;
    span_t secrets[JWT_SECRETS_MAX] = {{0}};
    int nsecrets = 0;
    bool has_secret = cfg->secret_file || (cfg->secret && *cfg->secret);
    if (has_secret && secrets_read(cfg->secret_file, cfg->secret, &text, secrets, &nsecrets, err, errlen) != 0) {
        *flag = cfg->secret_file ? "--jwt-secret-file" : "TALLY_JWT_SECRET";
        return -1;
    }
    auth_rules_t *r = calloc(1, sizeof *r);
    if (!r) {
        free(text);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (cfg->keys_file) {
        size_t len = 0;
        char notes[NOTES_MAX] = "", why[256];
        char *json = read_file(cfg->keys_file, AUTH_KEY_FILE_MAX, &len, err, errlen);
        if (json && !(r->file_set = jwk_set_parse((span_t){json, len}, notes, sizeof notes, why, sizeof why)))
            snprintf(err, errlen, "%s: %s%s%s", cfg->keys_file, why, notes[0] ? "; skipped: " : "", notes);
        free(json);
        if (!r->file_set) {
            *flag = "--jwt-keys";
            rules_free(r);
            free(text);
            return -1;
        }
        if (notes[0])
            log_line("level=warn event=jwt-keys-skipped file=\"%s\" skipped=\"%s\"", cfg->keys_file, notes);
    }
    r->has_issuer = cfg->issuer != NULL;
    r->has_audience = cfg->audience != NULL;
    snprintf(r->issuer, sizeof r->issuer, "%s", cfg->issuer ? cfg->issuer : "");
    snprintf(r->audience, sizeof r->audience, "%s", cfg->audience ? cfg->audience : "");
    snprintf(r->user_claim, sizeof r->user_claim, "%s", cfg->user_claim ? cfg->user_claim : JWT_DEFAULT_USER_CLAIM);
    if (!cfg->admin_claim || split_admin_claim(cfg->admin_claim, r->admin_claim, r->admin_value) != 0) {
        snprintf(r->admin_claim, sizeof r->admin_claim, "%s", JWT_DEFAULT_ADMIN_CLAIM);
        snprintf(r->admin_value, sizeof r->admin_value, "%s", JWT_DEFAULT_ADMIN_VALUE);
    }
    /* The fetcher: started, pointed elsewhere, or stopped. Only the main thread reloads, so the
     * pointer is read here without the lock. */
    jwks_fetcher_t *started = NULL, *stopped = NULL;
    if (cfg->jwks_url && !keys->fetcher) {
        if (jwks_fetcher_start(cfg->jwks_url, cfg->jwks_refresh_ms, on_url_set, keys, &started) != 0) {
            *flag = "--jwt-jwks-url";
            snprintf(err, errlen, "cannot start the JWKS fetcher");
            rules_free(r);
            free(text);
            return -1;
        }
    } else if (cfg->jwks_url)
        jwks_fetcher_set(keys->fetcher, cfg->jwks_url, cfg->jwks_refresh_ms); /* the URL was checked above */
    else
        stopped = keys->fetcher;

    pthread_rwlock_wrlock(&keys->lock);
    char *old_text = keys->text;
    auth_rules_t *old_rules = keys->rules;
    keys->text = text;
    memcpy(keys->secrets, secrets, sizeof secrets);
    keys->count = nsecrets;
    keys->rules = r;
    keys->url_configured = cfg->jwks_url != NULL;
    if (started)
        keys->fetcher = started;
    if (stopped)
        keys->fetcher = NULL;
    pthread_rwlock_unlock(&keys->lock);
    free(old_text);
    rules_free(old_rules);
    if (stopped) {
        jwks_fetcher_stop(stopped); /* no delivery after this */
        pthread_rwlock_wrlock(&keys->lock);
        jwk_set_t *old_url_set = keys->url_set;
        keys->url_set = NULL;
        pthread_rwlock_unlock(&keys->lock);
        jwk_set_free(old_url_set);
    }
    return 0;
}

int auth_keys_verify(auth_keys_t *keys, span_t token, uint64_t now_s, jwt_claims_t *claims, const char **why)
{
    pthread_rwlock_rdlock(&keys->lock);
    const auth_rules_t *r = keys->rules;
    if (keys->url_configured && !keys->url_set) {
        pthread_rwlock_unlock(&keys->lock);
        *why = "no key set has been loaded from the identity provider yet";
        return AUTH_KEYS_NOT_LOADED;
    }
    const jwk_set_t *sets[2];
    size_t nsets = 0;
    if (r && r->file_set)
        sets[nsets++] = r->file_set;
    if (keys->url_set)
        sets[nsets++] = keys->url_set;
    jwt_verifier_t v = {
        .secrets = keys->secrets,
        .nsecrets = (size_t)keys->count,
        .sets = sets,
        .nsets = nsets,
        .issuer = r && r->has_issuer ? r->issuer : NULL,
        .audience = r && r->has_audience ? r->audience : NULL,
        .user_claim = r ? r->user_claim : NULL,
        .admin_claim = r ? r->admin_claim : NULL,
        .admin_value = r ? r->admin_value : NULL,
    };
    int rc = jwt_verify_with(token, &v, now_s, claims, why);
    jwks_fetcher_t *fetcher = keys->fetcher;
    if (rc == JWT_UNKNOWN_KID)
        jwks_fetcher_poke(fetcher); /* asks only; the fetcher is stopped under the write lock's protection */
    pthread_rwlock_unlock(&keys->lock);
    return rc;
}

bool auth_keys_ready(auth_keys_t *keys)
{
    pthread_rwlock_rdlock(&keys->lock);
    bool ready = !keys->url_configured || keys->url_set != NULL;
    pthread_rwlock_unlock(&keys->lock);
    return ready;
}

uint64_t auth_keys_fetches(auth_keys_t *keys)
{
    pthread_rwlock_rdlock(&keys->lock);
    uint64_t n = keys->fetcher ? jwks_fetcher_fetches(keys->fetcher) : 0;
    pthread_rwlock_unlock(&keys->lock);
    return n;
}

void auth_keys_stop(auth_keys_t *keys)
{
    pthread_rwlock_wrlock(&keys->lock);
    jwks_fetcher_t *f = keys->fetcher;
    keys->fetcher = NULL;
    pthread_rwlock_unlock(&keys->lock);
    jwks_fetcher_stop(f);
    pthread_rwlock_wrlock(&keys->lock);
    jwk_set_free(keys->url_set);
    rules_free(keys->rules);
    free(keys->text);
    keys->url_set = NULL;
    keys->rules = NULL;
    keys->text = NULL;
    keys->count = 0;
    keys->url_configured = false;
    pthread_rwlock_unlock(&keys->lock);
}
