/* policies_admin.h — the item policy admin routes: PUT, GET and DELETE /v1/admin/policies/{target}
 * and GET /v1/admin/policies. Admin only; HTTP threads. */
#ifndef TALLY_HTTP_POLICIES_ADMIN_H
#define TALLY_HTTP_POLICIES_ADMIN_H

#include "http/app.h"

/* GET /v1/admin/policies: every policy in force on this node. */
void policies_admin_list(app_t *app, http_request_t *req);

/* PUT (replace), GET, DELETE /v1/admin/policies/{target}. */
void policies_admin_one(app_t *app, http_request_t *req, span_t target);

#endif
