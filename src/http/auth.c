/* auth.c — who is asking. Development mode: the X-User-Id header ("admin" is the admin). */
#include "core/ids.h"
#include "http/app.h"

#define DEV_USER_HEADER "x-user-id"
#define DEV_ADMIN_USER "admin"

static void reply_unauthenticated(http_request_t *req, const char *detail)
{
    answer_t a = {0};
    answer_problem(&a, 401, "unauthenticated", detail);
    a.www_authenticate = true;
    http_respond(req, &a);
    answer_free(&a);
}

bool auth_user_or_reply(const app_t *app, http_request_t *req, bool required, auth_t *who)
{
    *who = (auth_t){0};
    (void)app;
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
