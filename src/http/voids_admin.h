/* voids_admin.h — voiding a user's reactions: POST /v1/admin/users/{user}/void and /restore, and GET
 * /v1/admin/users/{user}. Admin only; HTTP threads. */
#ifndef TALLY_HTTP_VOIDS_ADMIN_H
#define TALLY_HTTP_VOIDS_ADMIN_H

#include "http/app.h"

/* POST …/void (restore false) or …/restore: one WRITE_VOID command. */
void voids_admin_change(app_t *app, http_request_t *req, span_t user, bool restore);

/* GET /v1/admin/users/{user}: {"user","voided","reactions"} from one snapshot. */
void voids_admin_get(app_t *app, http_request_t *req, span_t user);

#endif
