/* auth.h — the contract of auth.c: who is asking (a Bearer JWT, or X-User-Id in development mode),
 * admin rights. The keys in force are engine/authkeys.h's. */
#ifndef TALLY_HTTP_AUTH_H
#define TALLY_HTTP_AUTH_H

#include <pthread.h>

#include "core/jwt.h"
#include "core/span.h"
#include "engine/authkeys.h"
#include "http/request.h"

typedef struct app app_t; /* http/app.h */

/* Who is asking. */
typedef struct {
    bool known; /* a user was given */
    span_t user;
    bool admin;
} auth_t;

/* Identifies the user. With required, a request without a user is answered 401 (503 while the
 * identity provider's keys are not loaded yet). Returns true, or false having replied (401, 400
 * invalid-user-id, 503 unavailable). */
bool auth_user_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who);

/* The token of an Authorization value: the scheme Bearer in any case, one or more spaces or tabs,
 * then the token (trailing spaces and tabs dropped). Returns false when it is not one. */
bool auth_bearer_token(span_t value, span_t *token);

/* Admin rights, or a 401/403 answer. */
bool auth_admin_or_reply(const app_t *app, http_request_t *req);

/* Admin rights from the raw header values (Authorization, X-User-Id) of a head. */
bool auth_head_is_admin(const app_t *app, span_t authorization, size_t n_authorization, span_t user, size_t n_user);

/* Public reads without a user are limited per client address (--read-rate-limit), so one scraper
 * cannot starve the feed; false having replied 429. */
bool read_rate_or_reply(app_t *app, http_request_t *req, const auth_t *who);

#endif
