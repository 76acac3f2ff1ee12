/* auth.c — who is asking: a Bearer JWT (HS256) signed with one of the configured secrets, or in
 * development mode the X-User-Id header ("admin" is the admin). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/ids.h"
#include "http/auth.h"

#include "http/app.h"

#define BEARER_PREFIX "Bearer "
#define SECRET_FILE_MAX (64 * 1024)

#define DEV_USER_HEADER "x-user-id"
#define DEV_ADMIN_USER "admin"

int auth_keys_load(auth_keys_t *keys, const char *file, const char *secret, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            snprintf(err, errlen, "cannot read %s", file);
            return -1;
        }
        text = malloc(SECRET_FILE_MAX + 1);
        len = text ? fread(text, 1, SECRET_FILE_MAX + 1, f) : 0;
        fclose(f);
        if (!text || len > SECRET_FILE_MAX) {
            free(text);
            snprintf(err, errlen, "%s is larger than 64 KiB", file);
            return -1;
        }
    } else {
        len = strlen(secret);
        text = malloc(len + 1);
        if (!text) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(text, secret, len);
    }
    span_t secrets[JWT_SECRETS_MAX];
    int n = jwt_secrets_parse((span_t){text, len}, secrets, err, errlen);
    if (n <= 0) {
        free(text);
        return -1;
    }
    pthread_rwlock_wrlock(&keys->lock);
    free(keys->text);
    keys->text = text;
    memcpy(keys->secrets, secrets, sizeof secrets);
    keys->count = n;
    pthread_rwlock_unlock(&keys->lock);
    return 0;
}

static void reply_unauthenticated(http_request_t *req, const char *detail)
{
    reply_problem_with(req, 401, "unauthenticated", detail, (problem_headers_t){.www_authenticate = true});
}

bool auth_head_is_admin(const app_t *app, span_t authorization, size_t n_authorization, span_t user, size_t n_user)
{
    if (app->dev_mode)
        return n_user == 1 && span_eq_str(user, DEV_ADMIN_USER);
    size_t plen = strlen(BEARER_PREFIX);
    if (n_authorization != 1 || authorization.len <= plen || strncasecmp(authorization.ptr, BEARER_PREFIX, plen) != 0)
        return false;
    jwt_claims_t claims;
    const char *why = NULL;
    span_t token = {authorization.ptr + plen, authorization.len - plen};
    pthread_rwlock_rdlock(&app->keys->lock);
    int rc = jwt_verify(token, app->keys->secrets, (size_t)app->keys->count, (uint64_t)time(NULL), &claims, &why);
    pthread_rwlock_unlock(&app->keys->lock);
    return rc == 0 && claims.admin;
}

/* Bearer JWT: the user is `sub`, admin when `role` is "admin". The claims are copied into the
 * thread's buffer, valid until the thread's next request. */
static bool auth_jwt_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who)
{
    static _Thread_local jwt_claims_t claims;
    span_t value;
    size_t n = http_req_header(req, "authorization", &value);
    if (n == 0) {
        if (required)
            reply_unauthenticated(req, "this request needs a Bearer token");
        return !required;
    }
    size_t plen = strlen(BEARER_PREFIX);
    if (n > 1 || value.len <= plen || strncasecmp(value.ptr, BEARER_PREFIX, plen) != 0) {
        reply_unauthenticated(req, "Authorization must be one Bearer token");
        return false;
    }
    span_t token = {value.ptr + plen, value.len - plen};
    const char *why = NULL;
    pthread_rwlock_rdlock(&app->keys->lock);
    int rc = jwt_verify(token, app->keys->secrets, (size_t)app->keys->count, (uint64_t)time(NULL), &claims, &why);
    pthread_rwlock_unlock(&app->keys->lock);
    if (rc != 0) {
        reply_unauthenticated(req, why);
        return false;
    }
    who->known = true;
    who->user = span_of(claims.sub);
    who->admin = claims.admin;
    return true;
}

bool auth_user_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who)
{
    *who = (auth_t){0};
    if (!app->dev_mode)
        return auth_jwt_or_reply(app, req, required, who);
    span_t user;
    size_t n = http_req_header(req, DEV_USER_HEADER, &user);
    if (n == 0) {
        if (required)
            reply_unauthenticated(req, "this request needs a user (X-User-Id in development mode)");
        return !required;
    }
    if (n > 1 || !id_valid(user)) {
        reply_problem(req, 400, "invalid-user-id",
                      n > 1 ? "X-User-Id was given more than once"
                            : "a user id is 1-128 bytes of A-Z a-z 0-9 . _ : ~ - (and not . or ..)");
        return false;
    }
    who->known = true;
    who->user = user;
    who->admin = span_eq_str(user, DEV_ADMIN_USER);
    return true;
}

bool auth_admin_or_reply(const app_t *app, http_request_t *req)
{
    auth_t who;
    if (!auth_user_or_reply(app, req, true, &who))
        return false;
    if (!who.admin) {
        reply_problem(req, 403, "forbidden", "this needs admin rights");
        return false;
    }
    return true;
}
