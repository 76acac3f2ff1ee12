/* auth.c — who is asking: a Bearer JWT verified with the keys in force (engine/authkeys.h), or in
 * development mode the X-User-Id header ("admin" is the admin). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/ids.h"
#include "http/auth.h"

#include "http/app.h"

#define BEARER_SCHEME "Bearer"

#define DEV_USER_HEADER "x-user-id"
#define DEV_ADMIN_USER "admin"

bool auth_bearer_token(span_t value, span_t *token)
{
    size_t plen = strlen(BEARER_SCHEME), i = plen;
    if (value.len <= plen || strncasecmp(value.ptr, BEARER_SCHEME, plen) != 0)
        return false;
    while (i < value.len && (value.ptr[i] == ' ' || value.ptr[i] == '\t'))
        i++;
    size_t end = value.len;
    while (end > i && (value.ptr[end - 1] == ' ' || value.ptr[end - 1] == '\t'))
        end--;
    if (i == plen || end == i)
        return false; /* "Bearerxyz", or no token */
    *token = (span_t){value.ptr + i, end - i};
    return true;
}

static void reply_unauthenticated(http_request_t *req, const char *detail)
{
    reply_problem_with(req, 401, "unauthenticated", detail, (problem_headers_t){.www_authenticate = true});
}

bool auth_head_is_admin(const app_t *app, span_t authorization, size_t n_authorization, span_t user, size_t n_user)
{
    if (app->dev_mode)
        return n_user == 1 && span_eq_str(user, DEV_ADMIN_USER);
    span_t token;
    if (n_authorization != 1 || !auth_bearer_token(authorization, &token))
        return false;
    jwt_claims_t claims;
    const char *why = NULL;
    return auth_keys_verify(app->keys, token, (uint64_t)time(NULL), &claims, &why) == 0 && claims.admin;
}

/* Bearer JWT: the user is the user claim (`sub`), admin when the admin claim holds its value
 * (`role` is "admin"). The claims are copied into the thread's buffer, valid until the thread's
 * next request. */
static bool auth_jwt_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who)
{
    static _Thread_local jwt_claims_t claims;
    span_t value, token;
    size_t n = http_req_header(req, "authorization", &value);
    if (required && !auth_keys_ready(app->keys)) {
        reply_problem(req, 503, "unavailable",
                      "the identity provider's keys (--jwt-jwks-url) are not loaded yet; retry shortly");
        return false;
    }
    if (n == 0) {
        if (required)
            reply_unauthenticated(req, "this request needs a Bearer token");
        return !required;
    }
    if (n > 1 || !auth_bearer_token(value, &token)) {
        reply_unauthenticated(req, "Authorization must be one Bearer token: Bearer, one or more spaces, the token");
        return false;
    }
    const char *why = NULL;
    int rc = auth_keys_verify(app->keys, token, (uint64_t)time(NULL), &claims, &why);
    if (rc == AUTH_KEYS_NOT_LOADED && !required)
        return true; /* a public read: answered without a viewer until the keys are loaded */
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

bool read_rate_or_reply(app_t *app, http_request_t *req, const auth_t *who)
{
    ratelimit_t *limit = atomic_load(&app->read_limit);
    if (who->known || !limit)
        return true;
    http_client_t client;
    http_client_of(atomic_load(&app->client_rules), req, &client);
    return rate_or_reply(app, limit, req, http_client_key(&client));
}
