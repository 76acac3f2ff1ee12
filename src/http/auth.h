/* auth.h — the contract of auth.c: who is asking (a Bearer JWT, or X-User-Id in development mode),
 * admin rights, and the JWT secrets in force. */
#ifndef TALLY_HTTP_AUTH_H
#define TALLY_HTTP_AUTH_H

#include <pthread.h>

#include "core/jwt.h"
#include "core/span.h"
#include "http/request.h"

typedef struct app app_t; /* http/app.h */

/* The JWT secrets in force; replaced as a whole on reload (SIGHUP). */
typedef struct {
    pthread_rwlock_t lock;
    char *text; /* the file's bytes, or the environment's secret */
    span_t secrets[JWT_SECRETS_MAX];
    int count;
} auth_keys_t;

/* Who is asking. */
typedef struct {
    bool known; /* a user was given */
    span_t user;
    bool admin;
} auth_t;

/* Identifies the user. With required, a request without a user is answered 401. Returns true, or
 * false having replied (401, 400 invalid-user-id). */
bool auth_user_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who);

/* Loads the secrets: from the file when given (one per line), else from secret. Returns 0, or -1
 * with a message in err (the keys in force are kept). */
int auth_keys_load(auth_keys_t *keys, const char *file, const char *secret, char *err, size_t errlen);

/* Admin rights, or a 401/403 answer. */
bool auth_admin_or_reply(const app_t *app, http_request_t *req);

/* Admin rights from the raw header values (Authorization, X-User-Id) of a head. */
bool auth_head_is_admin(const app_t *app, span_t authorization, size_t n_authorization, span_t user, size_t n_user);

#endif
